"""The `larbinpy` command: run a crawl, submit URLs, benchmark, check a configuration.

Exit codes (docs/operations.md): 0 done or stopped cleanly, 2 bad configuration or arguments,
1 crash.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Sequence
from pathlib import Path

from larbinpy.config import KEYS, Config, ConfigError, describe, load_config
from larbinpy.frontier.state import StateError
from larbinpy.runtime import (
    catch_early_sigterm,
    missing_extra,
    run_loop,
    setup_logging,
    tune_gc,
)

log = logging.getLogger("larbinpy")


def check_runtime(cfg: Config) -> None:
    """Checks that need the file system: files the configuration names must exist, and the
    places it writes must be writable (else the crawl would stop with a traceback later)."""
    from larbinpy.crawler import crawl_log_path

    log_path = crawl_log_path(cfg)
    for name, path, directory in (("statedir", cfg.state_dir, True),
                                  ("savedir", cfg.save_dir, True),
                                  ("logfile", cfg.log_file, False),
                                  ("crawllog", log_path and str(log_path), False)):
        if path and (problem := path_problem(path, directory)):
            raise cfg.error(name, f"{KEYS[name].larbin} {path}: {problem}")
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


def path_problem(path: str, directory: bool) -> str | None:
    """Why larbinpy could not create or write `path` (a directory or a file); None if it can."""
    p = Path(path)
    if p.exists():
        if p.is_dir() != directory:
            return "is a directory" if p.is_dir() else "is not a directory"
        where = p
    else:  # created at start: its nearest existing ancestor must be a writable directory
        where = p.parent
        while not where.exists() and where != where.parent:
            where = where.parent
        if not where.is_dir():
            return f"{where} is not a directory"
    if not os.access(where, os.W_OK):
        read_only = os.statvfs(where).f_flag & os.ST_RDONLY
        return f"{where} is on a read-only file system" if read_only else \
            f"{where} is not writable"
    return None


def cmd_crawl(args: argparse.Namespace) -> int:
    """Run a crawl."""
    catch_early_sigterm()
    cfg = load_config(args.config)
    check_runtime(cfg)
    if args.http_port is not None:
        cfg.http_port = args.http_port
    if args.input_port is not None:
        cfg.input_port = args.input_port
    setup_logging(args.verbose - args.quiet, cfg.log_file, cfg.log_format)
    for warning in cfg.warnings:
        log.warning("%s", warning)
    from larbinpy.crawler import Crawler

    async def main() -> int:
        crawler = Crawler(cfg, scratch=args.scratch, progress=True)
        tune_gc()
        return await crawler.run()

    return run_loop(main())


def cmd_check_config(args: argparse.Namespace) -> int:
    """Validate a configuration and print it."""
    from larbinpy.links.urls import DEFAULT_STRIP_PARAMS

    cfg = load_config(args.config)
    check_runtime(cfg)
    for warning in cfg.warnings:
        print(f"larbinpy: warning: {warning}", file=sys.stderr)
    built_in = " ".join(sorted(DEFAULT_STRIP_PARAMS)) + " (built-in)"
    try:
        print(describe(cfg, {"stripParams": built_in}))
        kind = cfg.seen_set if cfg.cluster is None else "exact"  # a cluster's is always exact
        print(hash_set_report(cfg.hash_size, cfg.hash_functions, kind))
        sys.stdout.flush()
    except BrokenPipeError:  # `| head`: the reader has all it wanted
        # Python flushes stdout again at exit: point it at /dev/null so that says nothing
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    return 0


WARN_URLS = 10**7  # the crawl size check-config judges hashSize for
WARN_RATE = 0.01  # share of new URLs a pure bitmap may drop at WARN_URLS before a warning


def hash_set_report(bits: int, functions: int, seen_set: str = "bitmap") -> str:
    """Expected false-positive rate of the URL hash set at a few crawl sizes, and a warning
    when `seenSet bitmap` would drop more than 1% of new URLs in a 10M-URL crawl."""
    from larbinpy.frontier.seen import false_positive_rate

    kind = "larbin's bitmap" if functions == 1 else f"a Bloom filter, K={functions}"
    lines = [f"# hash set: {bits} bits ({bits / 8 / 2**20:g} MiB), {kind}"]
    exact = seen_set == "exact"
    if exact:
        lines.append("# seenSet exact: a set bit is confirmed against URL fingerprints on disk, "
                     "so no new URL is lost; p below is the share of new URLs that costs a "
                     "lookup there")
    what = "needs a fingerprint lookup" if exact else "is taken for seen (lost)"
    for n in (10**6, 10**7, 10**8, 10**9):
        rate = false_positive_rate(bits, functions, n)
        shown = f"{rate:.3%}" if rate >= 1e-4 else f"{rate:.1e}"
        lines.append(f"#   after {n:>13,} URLs: a new URL {what} with p = {shown}")
    rate = false_positive_rate(bits, functions, WARN_URLS)
    if seen_set == "bitmap" and rate > WARN_RATE:
        lines.append(f"# WARNING: hashSize {bits} is small for a crawl of {WARN_URLS:,} URLs: "
                     f"seenSet bitmap then drops {rate:.1%} of new URLs as already seen; "
                     "raise hashSize or use seenSet exact")
    return "\n".join(lines)


SUBCOMMANDS = ("submit", "check-config", "bench", "report", "wacz")
USAGE = ("larbinpy [-h] [--version] [-c CONFIG] [--scratch] [--http-port N] [--input-port N]"
         " [-v] [-q]\n"
         "       larbinpy [-c CONFIG] [-v] [-q] {submit,check-config,bench,wacz} ...\n"
         "       larbinpy report CRAWL_LOG [--top N] [--json]")


class _HelpFormatter(argparse.HelpFormatter):
    """argparse's formatter, as wide as argparse makes it (`shutil.get_terminal_size`) without
    importing shutil (and bz2, lzma with it): argparse makes one per `add_argument`."""

    def __init__(self, prog: str, indent_increment: int = 2, max_help_position: int = 24,
                 width: int | None = None) -> None:
        super().__init__(prog, indent_increment, max_help_position,
                         _columns() - 2 if width is None else width)


def _columns() -> int:
    """The terminal's width as shutil.get_terminal_size() gives it: $COLUMNS, else stdout's
    terminal, else 80."""
    try:
        columns = int(os.environ["COLUMNS"])
    except (KeyError, ValueError):
        columns = 0
    try:
        lines = int(os.environ["LINES"])
    except (KeyError, ValueError):
        lines = 0
    if columns <= 0 or lines <= 0:
        try:
            # sys.__stdout__ is None without a stdout: the AttributeError below, as in shutil
            size = os.get_terminal_size(sys.__stdout__.fileno())  # type: ignore[union-attr]  # see above
        except (AttributeError, ValueError, OSError):
            size = os.terminal_size((80, 24))
        if columns <= 0:
            columns = size.columns or 80
    return columns


def crawl_parser() -> argparse.ArgumentParser:
    """`larbinpy -c larbin.conf [--scratch]`, and the options every subcommand takes."""
    from larbinpy import __version__

    p = argparse.ArgumentParser(
        prog="larbinpy", usage=USAGE, formatter_class=_HelpFormatter,
        description="larbin's crawler on one asyncio loop. Without a subcommand it crawls (a "
        "daemon unless exitAtEnd). Subcommands: submit (send URLs to a running crawler), "
        "check-config (validate and print a larbin.conf), bench (benchmarks), report (sum up a "
        "crawl log), wacz (pack a crawl's WARC files as a WACZ); "
        "see `larbinpy SUBCOMMAND -h`.",
    )
    p.add_argument("--version", action="version", version=f"larbinpy {__version__}")
    p.add_argument("-c", "--config", default=None, help="larbin.conf to use [./larbin.conf]")
    p.add_argument("--scratch", action="store_true", help="ignore saved state, start fresh")
    p.add_argument("--http-port", type=_port, default=None, metavar="N",
                   help="status port instead of larbin.conf's httpPort (0: off)")
    p.add_argument("--input-port", type=_port, default=None, metavar="N",
                   help="input port instead of larbin.conf's inputPort (0: off)")
    p.add_argument("-v", "--verbose", action="count", default=0,
                   help="log debug messages too (default: info, warnings, errors)")
    p.add_argument("-q", "--quiet", action="count", default=0,
                   help="log warnings and errors only")
    return p


def _port(text: str) -> int:
    """A TCP port number (0 turns the port off)."""
    port = int(text)
    if not 0 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"{port} is not a port (0 to 65535)")
    return port


def check_config_parser() -> argparse.ArgumentParser:
    """`larbinpy check-config [-c larbin.conf]`."""
    p = argparse.ArgumentParser(prog="larbinpy check-config", formatter_class=_HelpFormatter,
                                description="Validate a larbin.conf and print the settings in "
                                "effect; exit 2 when it is wrong.")
    p.add_argument("-c", "--config", default=None,
                   help="the larbin.conf to check [./larbin.conf]")
    return p


def wacz_parser() -> argparse.ArgumentParser:
    """`larbinpy wacz DIR -o FILE`."""
    p = argparse.ArgumentParser(prog="larbinpy wacz", formatter_class=_HelpFormatter,
                                description="Pack the WARC files of a crawl (its saveDir, "
                                "`output warc`), their CDXJ indexes, the list of its HTML pages "
                                "and a datapackage.json with sha256 hashes into one WACZ file "
                                "(what ReplayWeb.page opens).")
    p.add_argument("dir", metavar="DIR", help="the folder of the WARC files (saveDir)")
    p.add_argument("-o", "--output", required=True, metavar="FILE",
                   help="the WACZ file to write (replaced if it exists)")
    p.add_argument("--title", default=None, help="the collection's title [larbinpy crawl of DIR]")
    return p


def cmd_wacz(args: argparse.Namespace) -> int:
    """Pack a crawl's WARC files as a WACZ; exit 2 when DIR cannot be packed."""
    from larbinpy.outputs.wacz import WaczError, pack

    target = Path(args.output)
    if target.suffix != ".wacz":
        print(f"larbinpy wacz: {target}: a WACZ file's name ends in .wacz", file=sys.stderr)
        return 2
    try:
        packed = pack(Path(args.dir), target, title=args.title)
    except (WaczError, OSError) as exc:
        print(f"larbinpy wacz: {exc}", file=sys.stderr)
        return 2
    print(f"{target}: {len(packed.warcs)} WARC files ({packed.warc_bytes:,} bytes), "
          f"{packed.captures:,} captures indexed, {packed.pages:,} pages", file=sys.stderr)
    return 0


def split_argv(argv: list[str]) -> tuple[list[str], str | None, list[str]]:
    """(options before the subcommand, the subcommand or None, its arguments)."""
    i = 0
    while i < len(argv) and argv[i].startswith("-") and argv[i] != "-":
        i += 2 if argv[i] in ("-c", "--config") else 1
    if i < len(argv) and argv[i] in SUBCOMMANDS:
        return argv[:i], argv[i], argv[i + 1:]
    return argv, None, []


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the `larbinpy` command."""
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        before, command, rest = split_argv(argv)
        top = crawl_parser().parse_args(before)
        if command == "check-config":
            args = check_config_parser().parse_args(rest)
            args.config = args.config or top.config or "larbin.conf"
            return cmd_check_config(args)
        if command == "submit":
            from larbinpy.daemon.submit import main as submit_main

            return submit_main(rest, top.config)
        if command == "bench":
            if problem := missing_extra("larbinpy bench", "dnslib", "bench"):
                print(problem, file=sys.stderr)
                return 1
            from larbinpy.bench.measure import main as bench_main

            return bench_main(rest)
        if command == "report":
            if problem := missing_extra("larbinpy report", "datasketches", "report"):
                print(problem, file=sys.stderr)
                return 1
            from larbinpy.report import main as report_main

            return report_main(rest)
        if command == "wacz":
            setup_logging(top.verbose - top.quiet, None, "text")
            return cmd_wacz(wacz_parser().parse_args(rest))
        top.config = top.config or "larbin.conf"
        return cmd_crawl(top)
    except (ConfigError, StateError) as exc:
        print(f"larbinpy: {exc}", file=sys.stderr)
        return 2
    except SystemExit as exc:  # argparse: bad arguments exit 2 already
        return int(exc.code or 0)


if __name__ == "__main__":
    sys.exit(main())
