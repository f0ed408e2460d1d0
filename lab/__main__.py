"""`python3 -m lab list` and `python3 -m lab run NAME [--quick]`."""

from __future__ import annotations

import argparse
import signal
import sys
import traceback

from . import core, drivers, env, servers
from .experiments import EXPERIMENTS


def _terminate(signum, frame):
    # SIGTERM/SIGHUP take the same path as Ctrl-C: unwind, stopping servers.
    raise KeyboardInterrupt(f"signal {signum}")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python3 -m lab", description="weft's lab: run an experiment end to end.")
    sub = ap.add_subparsers(dest="cmd", required=True)
    sub.add_parser("list", help="list the experiments")
    r = sub.add_parser("run", help="run one experiment")
    r.add_argument("name", help="experiment name (see `list`)")
    r.add_argument("--quick", action="store_true", help="short form (under two minutes): one repetition, short runs")
    r.add_argument("--driver", default="wrk", choices=["wrk", "weft-load"], help="load generator (default wrk)")
    r.add_argument("--strict", action="store_true",
                   help="exit 3 when a run of weft saw non-2xx responses, socket errors or short bodies (an anchor's are "
                        "reported in the summary, and fail only experiments that do not tell weft's runs apart)")  # fmt: skip
    r.add_argument("--only", metavar="PART[,PART]",
                   help="run only these parts of the experiment (see `list`); their rows replace the same parts' rows in "
                        "the results' runs.json, the rest is kept, and the summary and plots cover everything")  # fmt: skip
    r.add_argument("--resume", action="store_true",
                   help="experiments that save each point as it is measured (wan-proxy): keep the points the results' "
                        "runs.json already holds for the parts run and measure only the others")  # fmt: skip
    s = sub.add_parser("summarize", help="rewrite an experiment's summary and plots from its runs.json (no measurement)")
    s.add_argument("name", help="experiment name")
    s.add_argument("--quick", action="store_true", help="the quick run's results (lab/results/NAME-quick/)")
    args = ap.parse_args(argv)

    if args.cmd == "list":
        for name, mod in EXPERIMENTS.items():
            print(f"{name:<18} {mod.DESCRIPTION}")
            if getattr(mod, "PARTS", None):
                print(f"{'':<18} parts (--only): {', '.join(mod.PARTS)}")
        return 0

    mod = EXPERIMENTS.get(args.name)
    if mod is None:
        print(f"lab: unknown experiment {args.name!r} (known: {', '.join(EXPERIMENTS)})", file=sys.stderr)
        return 2
    if args.cmd == "summarize":
        if not hasattr(mod, "resummarize"):
            print(f"lab: {args.name} cannot be summarized again (run it)", file=sys.stderr)
            return 2
        lab = core.Lab(args.name, args.quick)
        try:
            mod.resummarize(lab)
        except FileNotFoundError as e:
            print(f"lab: {e} (run the experiment first)", file=sys.stderr)
            return 1
        finally:
            lab.cleanup()
        return 0
    only = None
    if args.only:
        parts = getattr(mod, "PARTS", None)
        if not parts:
            print(f"lab: --only: {args.name} has no parts (it runs whole)", file=sys.stderr)
            return 2
        only = [p.strip() for p in args.only.split(",") if p.strip()]
        bad = [p for p in only if p not in parts]
        if bad or not only:
            print(f"lab: --only: unknown part {', '.join(bad) or repr(args.only)} of {args.name} (parts: {', '.join(parts)})", file=sys.stderr)
            return 2
    if args.resume and not getattr(mod, "RESUMABLE", False):
        print(f"lab: --resume: {args.name} does not save its points as it goes (it runs whole)", file=sys.stderr)
        return 2
    signal.signal(signal.SIGTERM, _terminate)
    signal.signal(signal.SIGHUP, _terminate)
    lab = core.Lab(args.name, args.quick, driver=args.driver)
    lab.only = only
    lab.resume = args.resume
    what = f"parts {', '.join(only)} of the " if only else ""
    lab.log(f"{args.name}: {what}{'quick' if args.quick else 'full'} run, results in {lab.results_dir}")
    try:
        outcome = mod.run(lab) or {}
    except KeyboardInterrupt:
        lab.log("interrupted: servers stopped, partial results (if any) left in place")
        return 130
    except (env.EnvError, servers.ServerError, drivers.DriverError) as e:
        lab.log(f"error: {e}")
        return 1
    except Exception:
        traceback.print_exc()
        lab.log("failed: servers stopped")
        return 1
    finally:
        lab.cleanup()
    lab.log(f"done in {lab.elapsed():.0f}s: {lab.results_dir}/summary.md")
    if outcome.get("problems"):
        lab.log(f"warning: {outcome['problems']} run(s) had non-2xx responses, socket errors or short bodies (see summary.md)")
        # Experiments that tell weft's runs from the anchors' fail only on
        # weft's: a Squid or Varnish hiccup is the anchor's, reported above.
        if args.strict and outcome.get("weft_problems", outcome["problems"]):
            return 3
    return 0


if __name__ == "__main__":
    sys.exit(main())
