"""``phasewatch subscribe`` and ``phasewatch proxy`` over real sockets: two
daemons joined by the proxy reach one subscriber."""

from __future__ import annotations

import json
import signal
import subprocess
import time

import psutil

from daemonutil import PHASEWATCH, Daemon, free_port, write_trace


def wait_connected(pid: int, port: int, timeout: float = 60.0) -> None:
    """Until process ``pid`` has a TCP connection established to ``port`` (a
    loaded host may take seconds to start a command)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if any(c.status == psutil.CONN_ESTABLISHED and c.raddr and c.raddr.port == port
               for c in psutil.Process(pid).net_connections("tcp")):
            return
        time.sleep(0.05)
    raise AssertionError(f"process {pid} did not connect to port {port} in {timeout} s")


def test_two_daemons_through_the_proxy_reach_one_subscriber(tmp_path):
    one = write_trace(tmp_path / "one.arrow", cpus=1)
    two = write_trace(tmp_path / "two.arrow", cpus=2)
    a_port, b_port, bind = free_port(), free_port(), f"tcp://127.0.0.1:{free_port()}"
    proxy = subprocess.Popen([str(PHASEWATCH), "proxy", "--connect", f"tcp://127.0.0.1:{a_port}",
                              "--connect", f"tcp://127.0.0.1:{b_port}", "--bind", bind],
                             stderr=subprocess.PIPE, text=True)
    sub = subprocess.Popen([str(PHASEWATCH), "subscribe", "phase.", "--endpoint", bind,
                            "--count", "15"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           text=True)
    wait_connected(sub.pid, int(bind.rsplit(":", 1)[1]))
    time.sleep(0.5)     # the subscription passed on before the daemons start
    a = Daemon("--replay", one, "--replay-speed", "4", zmq_port=a_port)
    b = Daemon("--replay", two, "--replay-speed", "4", zmq_port=b_port)
    try:
        out, err = sub.communicate(timeout=120)
        assert sub.returncode == 0, err
        events = []
        for line in out.splitlines():
            topic, _, body = line.partition(" ")
            events.append((topic, json.loads(body)))
        assert len(events) == 15
        assert all(t == f"phase.{e['target']}" and e["type"] == "phase" for t, e in events)
        assert any(t == "phase.cpu1" for t, _ in events)            # only daemon b has cpu1
        firsts = [e for t, e in events if t == "phase.cpu0" and e["seq"] == 0]
        assert len(firsts) == 2                                       # cpu0 of a and of b
        assert all(e["previous"] is None and e["index"] == 0 for e in firsts)
    finally:
        sub.kill()
        a.stop()
        b.stop()
        proxy.send_signal(signal.SIGTERM)
        assert proxy.wait(timeout=10) == 0, proxy.stderr.read()


def test_subscribe_and_proxy_refuse_bad_endpoints():
    for argv, words in ((["subscribe", "--endpoint", "nonsense"], "--endpoint nonsense"),
                        (["proxy", "--connect", "tcp://127.0.0.1:1", "--bind", "bogus://x"],
                         "--bind bogus://x")):
        proc = subprocess.run([str(PHASEWATCH), *argv], capture_output=True, text=True, timeout=30)
        assert proc.returncode == 2 and words in proc.stderr and "Traceback" not in proc.stderr


def test_proxy_stops_on_a_signal_while_it_forwards():
    """SIGTERM (or SIGINT) that comes while the proxy is busy forwarding, not
    waiting in its poll, still stops it at once, with status 0."""
    import zmq
    ctx = zmq.Context()
    try:
        for trial, signum in enumerate([signal.SIGTERM] * 5 + [signal.SIGINT]):
            pub = ctx.socket(zmq.PUB)
            port = pub.bind_to_random_port("tcp://127.0.0.1")
            bind = f"tcp://127.0.0.1:{free_port()}"
            proxy = subprocess.Popen([str(PHASEWATCH), "proxy", "--connect",
                                      f"tcp://127.0.0.1:{port}", "--bind", bind],
                                     stderr=subprocess.PIPE, text=True)
            sub = ctx.socket(zmq.SUB)
            sub.setsockopt(zmq.SUBSCRIBE, b"")
            sub.setsockopt(zmq.RCVHWM, 10)          # the proxy stays busy queueing for it
            sub.connect(bind)
            time.sleep(1.5)                          # subscribed through the proxy
            for burst in range(2):
                end = time.monotonic() + 0.3
                while time.monotonic() < end:
                    pub.send(b"x" * 100)
                if burst == 0:
                    proxy.send_signal(signum)
            try:
                status = proxy.wait(timeout=5)
            except subprocess.TimeoutExpired:
                proxy.kill()
                proxy.wait()
                status = "still running 5 s after the signal"
            finally:
                pub.close(0)
                sub.close(0)
            assert status == 0, f"trial {trial}: {status}; {proxy.stderr.read()}"
    finally:
        ctx.term()
