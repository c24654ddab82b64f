"""Linux ioctl request numbers (include/uapi/asm-generic/ioctl.h), for every
device phasewatch talks to: the kernel module, msr-safe's batch device."""

IOC_NONE, IOC_WRITE, IOC_READ = 0, 1, 2


def ioc(direction: int, magic: int, nr: int, size: int) -> int:
    """``_IOC(dir, type, nr, size)``: direction in bits 31:30, argument size in
    29:16, the driver's magic in 15:8, the request number in 7:0."""
    return direction << 30 | size << 16 | magic << 8 | nr
