"""The `larbinpy` command: run a crawl, submit URLs, benchmark, check a configuration.

Exit codes (SPEC.md): 0 done or stopped cleanly, 2 bad configuration or arguments, 1 crash.
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence
from pathlib import Path

from larbinpy.config import Config, ConfigError, describe, load_config
from larbinpy.frontier.state import StateError
from larbinpy.runtime import missing_extra, run_loop, setup_logging, tune_gc

log = logging.getLogger("larbinpy")


def check_runtime(cfg: Config) -> None:
    """Checks that need the file system: files the configuration names must exist."""
    if cfg.seed_file and not Path(cfg.seed_file).is_file():
        raise cfg.error("seedfile", f"seedFile {cfg.seed_file} does not exist")
    if cfg.ca_file and not Path(cfg.ca_file).is_file():
        raise cfg.error("cafile", f"caFile {cfg.ca_file} does not exist")
    if cfg.user_output:
        from larbinpy.outputs import load_hook

        try:
            load_hook(cfg.user_output)
        except (ImportError, AttributeError, TypeError) as exc:
            raise cfg.error("useroutput", f"userOutput {cfg.user_output}: {exc}") from None


def cmd_crawl(args: argparse.Namespace) -> int:
    """Run a crawl."""
    cfg = load_config(args.config)
    check_runtime(cfg)
    setup_logging(args.verbose - args.quiet, cfg.log_file)
    from larbinpy.crawler import Crawler

    async def main() -> int:
        crawler = Crawler(cfg, scratch=args.scratch, progress=True)
        tune_gc()
        return await crawler.run()

    return run_loop(main())


def cmd_check_config(args: argparse.Namespace) -> int:
    """Validate a configuration and print it."""
    cfg = load_config(args.config)
    check_runtime(cfg)
    print(describe(cfg))
    print(hash_set_report(cfg.hash_size, cfg.hash_functions, cfg.seen_set))
    return 0


WARN_URLS = 10**7  # the crawl size check-config judges hashSize for
WARN_RATE = 0.01  # share of new URLs a pure bitmap may drop at WARN_URLS before a warning


def hash_set_report(bits: int, functions: int, seen_set: str = "bitmap") -> str:
    """Expected false-positive rate of the URL hash set at a few crawl sizes, and a warning
    when `seenSet bitmap` would drop more than 1% of new URLs in a 10M-URL crawl."""
    from larbinpy.frontier.seen import false_positive_rate

    kind = "larbin's bitmap" if functions == 1 else f"a Bloom filter, K={functions}"
    lines = [f"# hash set: {bits} bits ({bits / 8 / 2**20:g} MiB), {kind}"]
    if seen_set == "exact":
        lines.append("# seenSet exact: a set bit is confirmed against URL fingerprints on disk, "
                     "so no new URL is lost; p below is the share that costs a disk lookup")
    for n in (10**6, 10**7, 10**8, 10**9):
        rate = false_positive_rate(bits, functions, n)
        shown = f"{rate:.3%}" if rate >= 1e-4 else f"{rate:.1e}"
        lines.append(f"#   after {n:>13,} URLs: a new URL is taken for seen with p = {shown}")
    rate = false_positive_rate(bits, functions, WARN_URLS)
    if seen_set == "bitmap" and rate > WARN_RATE:
        lines.append(f"# WARNING: hashSize {bits} is small for a crawl of {WARN_URLS:,} URLs: "
                     f"seenSet bitmap then drops {rate:.1%} of new URLs as already seen; "
                     "raise hashSize or use seenSet exact")
    return "\n".join(lines)


def crawl_parser() -> argparse.ArgumentParser:
    """`larbinpy -c larbin.conf [--scratch]`."""
    p = argparse.ArgumentParser(
        prog="larbinpy",
        description="larbin's crawler on one asyncio loop. Subcommands: submit, bench, "
        "check-config (see `larbinpy SUBCOMMAND -h`).",
    )
    p.add_argument("-c", "--config", default="larbin.conf", help="larbin.conf to use")
    p.add_argument("--scratch", action="store_true", help="ignore saved state, start fresh")
    p.add_argument("-v", "--verbose", action="count", default=0)
    p.add_argument("-q", "--quiet", action="count", default=0)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the `larbinpy` command."""
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        if argv and argv[0] == "check-config":
            p = argparse.ArgumentParser(prog="larbinpy check-config")
            p.add_argument("-c", "--config", default="larbin.conf")
            return cmd_check_config(p.parse_args(argv[1:]))
        if argv and argv[0] == "submit":
            from larbinpy.daemon.submit import main as submit_main

            return submit_main(argv[1:])
        if argv and argv[0] == "bench":
            if problem := missing_extra("larbinpy bench", "dnslib", "bench"):
                print(problem, file=sys.stderr)
                return 1
            from larbinpy.bench.measure import main as bench_main

            return bench_main(argv[1:])
        return cmd_crawl(crawl_parser().parse_args(argv))
    except (ConfigError, StateError) as exc:
        print(f"larbinpy: {exc}", file=sys.stderr)
        return 2
    except SystemExit as exc:  # argparse: bad arguments exit 2 already
        return int(exc.code or 0)


if __name__ == "__main__":
    sys.exit(main())
