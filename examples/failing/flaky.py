"""A container that misbehaves on purpose, to exercise restart policies, backoff and deadlines.

Every option can also come from the environment (FLAKY_MODE, FLAKY_EXIT_CODE, ...); the command
line wins. Modes:

  succeed  exit 0
  exit     exit with --exit-code (default 1)
  flaky    fail the first --fail-times attempts (with --exit-code, or --signal if given), then
           succeed; attempts are counted in the file --state, which must outlive the attempt:
           an emptyDir survives an in-place restart (OnFailure), a new pod needs a
           persistentVolumeClaim (Never, ExitCode)
  sleep    sleep --seconds (default: forever), then exit 0; for activeDeadlineSeconds
  signal   kill itself with --signal (default KILL: the container reports 137)
  memory   allocate and touch --memory-mb MiB, 16 MiB at a time, then exit 0; beyond a
           memory limit the platform should kill it (OOMKilled, 137)

--delay S waits S seconds first, so the pod is seen Running before it acts.
"""
import argparse
import os
import signal
import sys
import time


def env(name, default):
    return os.environ.get(f"FLAKY_{name}", default)


def parse():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter,
                                epilog=__doc__.split("\n", 2)[2])
    p.add_argument("--mode", default=env("MODE", "exit"),
                   choices=["succeed", "exit", "flaky", "sleep", "signal", "memory"])
    p.add_argument("--exit-code", type=int, default=int(env("EXIT_CODE", "1")))
    p.add_argument("--fail-times", type=int, default=int(env("FAIL_TIMES", "1")))
    p.add_argument("--state", default=env("STATE", "/state/attempts"))
    p.add_argument("--signal", default=env("SIGNAL", ""), help="KILL, TERM, SEGV, ...")
    p.add_argument("--seconds", type=float, default=float(env("SECONDS", "0")),
                   help="for sleep: 0 means forever")
    p.add_argument("--memory-mb", type=int, default=int(env("MEMORY_MB", "512")))
    p.add_argument("--delay", type=float, default=float(env("DELAY", "0")))
    p.add_argument("--ignore-sigterm", action="store_true",
                   default=env("IGNORE_SIGTERM", "") not in ("", "0"),
                   help="keep running on SIGTERM, so only a SIGKILL ends it")
    args = p.parse_args()
    if args.signal and not hasattr(signal, "SIG" + args.signal.upper().removeprefix("SIG")):
        p.error(f"unknown signal {args.signal!r}")
    return args


def say(msg):
    print(f"[flaky pid={os.getpid()} host={os.uname().nodename}] {msg}", flush=True)


def kill_self(name):
    sig = getattr(signal, "SIG" + name.upper().removeprefix("SIG"))
    say(f"killing myself with SIG{sig.name.removeprefix('SIG')}")
    if sig not in (signal.SIGKILL, signal.SIGSTOP):  # these two cannot be caught anyway
        signal.signal(sig, signal.SIG_DFL)
    os.kill(os.getpid(), sig)
    time.sleep(1)  # a PID 1 without a handler ignores the signal; fall back to the shell's code
    say("still alive (running as PID 1?); exiting with 128 + signal")
    sys.exit(128 + sig)


def fail(args):
    if args.signal:
        kill_self(args.signal)
    say(f"exiting with code {args.exit_code}")
    sys.exit(args.exit_code)


def next_attempt(path):
    """Increment and return the attempt counter kept in `path`."""
    try:
        with open(path) as f:
            n = int(f.read().strip() or 0) + 1
    except FileNotFoundError:
        n = 1
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    with open(path + ".tmp", "w") as f:
        f.write(f"{n}\n")
    os.replace(path + ".tmp", path)
    return n


def allocate(megabytes):
    chunk = 16 * 2**20
    held = []
    for i in range(0, megabytes, 16):
        block = bytearray(chunk)
        block[::4096] = b"\x01" * (chunk // 4096)  # touch every page so it is really resident
        held.append(block)
        if (i // 16) % 8 == 7:
            say(f"holding {i + 16} MiB")
    say(f"allocated {len(held) * 16} MiB without being stopped")


def main():
    args = parse()
    if args.ignore_sigterm:
        signal.signal(signal.SIGTERM, lambda *_: say("SIGTERM received and ignored"))
    say(f"mode={args.mode}")
    if args.delay:
        time.sleep(args.delay)

    if args.mode == "succeed":
        say("succeeding")
    elif args.mode == "exit":
        fail(args)
    elif args.mode == "flaky":
        n = next_attempt(args.state)
        if n <= args.fail_times:
            say(f"attempt {n}: failing ({args.fail_times} failures planned, counter {args.state})")
            fail(args)
        say(f"attempt {n}: succeeding after {args.fail_times} failures")
    elif args.mode == "sleep":
        say(f"sleeping {'forever' if not args.seconds else f'{args.seconds:g} s'}")
        deadline = time.time() + args.seconds if args.seconds else float("inf")
        while time.time() < deadline:
            time.sleep(min(1.0, deadline - time.time()))
        say("woke up")
    elif args.mode == "signal":
        kill_self(args.signal or "KILL")
    elif args.mode == "memory":
        allocate(args.memory_mb)


if __name__ == "__main__":
    main()
