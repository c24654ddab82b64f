"""``phasewatch subscribe`` and ``phasewatch proxy`` over real sockets: two
daemons joined by the proxy reach one subscriber."""

from __future__ import annotations

import json
import signal
import subprocess
import time

from daemonutil import PHASEWATCH, Daemon, free_port, write_trace


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
    time.sleep(2.0)     # both up and subscribed before the daemons start
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
