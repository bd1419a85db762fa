"""How fast the command line answers, and the cold first run (a measurement, not a test; issue 42).

    python -m benchmarks.cli_latency                              # this checkout: the quick commands, 3 times each
    python -m benchmarks.cli_latency --code /tmp/before --repeat 3
    python -m benchmarks.cli_latency --cold --cold-timeout 600    # also `geneval` with an empty GENEVAL_CACHE
    python -m benchmarks.cli_latency --json cli.json              # the rows as JSON too

Every command runs as ``python -m genEval.cli ...`` of ``--code`` (its folder first on ``PYTHONPATH``) in a fresh
empty working folder, one at a time. For each: the exit status, wall seconds and **CPU seconds** (user + sys of the
child, from ``resource.getrusage(RUSAGE_CHILDREN)`` before and after; on a shared machine wall time is mostly waiting,
CPU time is what the command costs), whether it imported torch (one more run with ``-X importtime``, not timed: a
line for ``torch`` in its import log says so), whether it left an ``outputs/`` folder in the working folder, and its
first line of output. The median over ``--repeat`` runs is printed, with the load average before the first. The quick
commands get an empty ``GENEVAL_CACHE`` unless ``--cache`` names one (a warm cache: ``device=cuda`` is then refused
after loading the models, not after training them, on code that builds them first).

``--cold`` runs the offline default (``geneval seed=0``) once with ``GENEVAL_CACHE`` pointed at an empty folder: the
first run trains the demo's models, then evaluates. Its stdout and stderr are read line by line as they come (tqdm's
carriage-return updates count as lines); the table gives the wall and CPU seconds, the longest silence between two
lines (``progress throughout`` means this stays short) and the headline line it ends with.
"""

from __future__ import annotations

if __name__ == "__main__" and not __package__:  # run as `python benchmarks/cli_latency.py`: rerun as a module
    import _as_module  # benchmarks/_as_module.py, beside this file

    _as_module.rerun(__file__)

import argparse
import json
import os
import resource
import selectors
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.harness import results

ROOT = Path(__file__).resolve().parents[1]

#: (label, arguments): what a newcomer types in the first minutes (issue 42's table).
QUICK: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("geneval --help", ("--help",)),
    ("geneval compare --help", ("compare", "--help")),
    ("geneval compar (a typo)", ("compar",)),
    ("geneval data.limt=5 (a typo'd key)", ("data.limt=5",)),
    ("geneval batch_size=0 (a refusal)", ("batch_size=0",)),
    ("geneval device=cuda (no GPU here)", ("device=cuda",)),
    ("geneval --data.limit=5 (dashes)", ("--data.limit=5", "search.budget=abc")),
    ("geneval report runs/none (positional)", ("report", "runs/none")),
    ("geneval list classifiers", ("list", "classifiers")),
    ("geneval runs . (no runs)", ("runs", ".")),
)


def _cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _env(code: Path, extra: dict[str, str] | None = None) -> dict[str, str]:
    env = {**os.environ, **(extra or {})}
    env["PYTHONPATH"] = str(code) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env.pop("HYDRA_FULL_ERROR", None)
    return env


def run_quick(code: Path, args: tuple[str, ...], cache: Path, importtime: bool = False) -> dict:
    """One quick command in a fresh folder: status, wall, CPU, outputs/ left, first line; with ``importtime``
    (``-X importtime``, which costs time of its own) also whether it imported torch."""
    with tempfile.TemporaryDirectory(prefix="cli-latency-") as work:
        cpu0, t0 = _cpu(), time.perf_counter()
        proc = subprocess.run(
            [sys.executable, *(["-X", "importtime"] if importtime else []), "-m", "genEval.cli", *args],
            cwd=work,
            env=_env(code, {"GENEVAL_CACHE": str(cache)}),
            capture_output=True,
            text=True,
            timeout=600,
        )
        wall, cpu = time.perf_counter() - t0, _cpu() - cpu0
        imports = [ln for ln in proc.stderr.splitlines() if ln.startswith("import time:")]
        text = (proc.stdout + proc.stderr).splitlines()
        said = [ln for ln in text if ln.strip() and not ln.startswith("import time:")]
        return {
            "rc": proc.returncode,
            "wall_s": wall,
            "cpu_s": cpu,
            "torch": any(ln.rsplit("|", 1)[-1].strip() == "torch" for ln in imports) if importtime else None,
            "outputs_left": (Path(work) / "outputs").exists(),
            "first_line": said[0][:150] if said else "",
        }


def run_cold(code: Path, timeout: float, overrides: list[str]) -> dict:
    """``geneval seed=0`` with an empty cache: wall, CPU, the longest silence between output lines, the last lines."""
    with tempfile.TemporaryDirectory(prefix="cli-cold-") as work:
        cache = Path(work) / "cache"
        cache.mkdir()
        cmd = [sys.executable, "-m", "genEval.cli", "seed=0", f"hydra.run.dir={work}/run", *overrides]
        cpu0, t0 = _cpu(), time.perf_counter()
        proc = subprocess.Popen(
            cmd, cwd=work, env=_env(code, {"GENEVAL_CACHE": str(cache)}), stdout=subprocess.PIPE, stderr=subprocess.PIPE
        )
        sel = selectors.DefaultSelector()
        for stream, name in ((proc.stdout, "out"), (proc.stderr, "err")):
            os.set_blocking(stream.fileno(), False)
            sel.register(stream, selectors.EVENT_READ, name)
        lines: list[tuple[float, str, str]] = []
        pending = {"out": b"", "err": b""}
        last, longest, timed_out = t0, 0.0, False
        open_streams = 2
        while open_streams:
            if time.perf_counter() - t0 > timeout:
                proc.kill()
                timed_out = True
                break
            for key, _ in sel.select(timeout=1.0):
                chunk = key.fileobj.read()
                if not chunk:
                    sel.unregister(key.fileobj)
                    open_streams -= 1
                    continue
                buf = pending[key.data] + chunk
                *done, pending[key.data] = buf.replace(b"\r", b"\n").split(b"\n")
                now = time.perf_counter()
                for raw in done:
                    text = raw.decode(errors="replace").strip()
                    if text:
                        longest, last = max(longest, now - last), now
                        lines.append((now - t0, key.data, text))
        proc.wait()
        wall, cpu = time.perf_counter() - t0, _cpu() - cpu0
        if not timed_out:
            longest = max(longest, time.perf_counter() - last)
        out = [t for _, s, t in lines if s == "out"]
        return {
            "rc": None if timed_out else proc.returncode,
            "timed_out": timed_out,
            "wall_s": wall,
            "cpu_s": cpu,
            "longest_silence_s": longest,
            "stdout_first": out[0] if out else "",
            "stderr_lines": [f"{t:7.1f}s {text}" for t, s, text in lines if s == "err"][:80],
            "stdout": out,
        }


def _load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--code", type=Path, default=ROOT, help="the checkout to measure (default: this one)")
    ap.add_argument("--repeat", type=int, default=3, help="runs of each quick command (the median is shown)")
    ap.add_argument("--only", nargs="*", help="labels (substrings) of the quick commands to run")
    ap.add_argument("--cold", action="store_true", help="also run `geneval seed=0` with an empty GENEVAL_CACHE")
    ap.add_argument("--cold-only", action="store_true", help="only the cold run")
    ap.add_argument("--cold-timeout", type=float, default=600.0, help="stop the cold run after this many seconds")
    ap.add_argument("--cold-override", action="append", default=[], help="extra overrides of the cold run")
    ap.add_argument("--json", type=Path, help="also write the rows to this file")
    ap.add_argument("--cache", type=Path, help="GENEVAL_CACHE of the quick commands (default: a fresh empty folder)")
    args = ap.parse_args()
    code = args.code.resolve()
    head = subprocess.run(["git", "-C", str(code), "log", "--oneline", "-1"], capture_output=True, text=True).stdout
    print(f"code: {code} ({head.strip()}); python {sys.version.split()[0]}; {os.cpu_count()} CPUs")
    report: dict = {"code": str(code), "commit": head.strip(), "quick": {}, "cold": None}
    if not args.cold_only:
        print(f"load average before: {_load()}")
        print("| command | exit | wall s | CPU s | imports torch | leaves outputs/ | first line |")
        print("|---|---|---|---|---|---|---|")
        with tempfile.TemporaryDirectory(prefix="cli-cache-") as fresh:
            cache = str(args.cache) if args.cache else fresh
            for label, cmd in QUICK:
                if args.only and not any(o in label for o in args.only):
                    continue
                runs = [run_quick(code, cmd, Path(cache)) for _ in range(max(1, args.repeat))]
                row = {
                    **runs[-1],
                    "torch": run_quick(code, cmd, Path(cache), importtime=True)["torch"],
                    "wall_s": statistics.median(r["wall_s"] for r in runs),
                    "cpu_s": statistics.median(r["cpu_s"] for r in runs),
                    "runs": len(runs),
                }
                report["quick"][label] = row
                first = row["first_line"].replace("|", "\\|")
                print(
                    f"| `{label}` | {row['rc']} | {row['wall_s']:.2f} | {row['cpu_s']:.2f} | "
                    f"{'yes' if row['torch'] else 'no'} | {'yes' if row['outputs_left'] else 'no'} | {first} |",
                    flush=True,
                )
        print(f"load average after: {_load()}")
    if args.cold or args.cold_only:
        print(f"\ncold first run (empty GENEVAL_CACHE), load average before: {_load()}", flush=True)
        cold = run_cold(code, args.cold_timeout, args.cold_override)
        report["cold"] = cold
        for line in cold["stderr_lines"]:
            print("  stderr " + line)
        print("  stdout:\n    " + "\n    ".join(cold["stdout"]))
        state = f"stopped at {args.cold_timeout:.0f} s" if cold["timed_out"] else f"exit {cold['rc']}"
        print(
            f"cold first run: {state}, wall {cold['wall_s']:.1f} s, CPU {cold['cpu_s']:.1f} s, longest silence "
            f"{cold['longest_silence_s']:.1f} s; load average after: {_load()}"
        )
    if args.json:
        args.json.write_text(json.dumps(report, indent=2))


if __name__ == "__main__":
    raise SystemExit(results.run(main, __file__))
