"""Whether this kernel can load a module, for the fixes phasewatch suggests:
``modprobe msr`` is no fix on a kernel built without loadable modules (no
``/proc/modules``) or one that has stopped loading them
(``/proc/sys/kernel/modules_disabled``)."""

from __future__ import annotations

from pathlib import Path


def load_hint(module: str, what: str = "", proc: str = "/proc") -> str:
    """``load the msr module (modprobe msr)``; where no module can be
    loaded, that ``module`` would have to be built into the kernel."""
    why = cannot_load(proc)
    if why is None:
        return f"load the {what or module + ' module'} (modprobe {module})"
    return f"this kernel {why}; {module} must be built in"


def cannot_load(proc: str = "/proc") -> str | None:
    """Why this kernel loads no module, or None where it can."""
    if not Path(proc, "modules").exists():
        return "cannot load modules (no /proc/modules)"
    try:
        if Path(proc, "sys/kernel/modules_disabled").read_text().strip() == "1":
            return "loads no more modules (kernel.modules_disabled = 1)"
    except OSError:
        pass
    return None
