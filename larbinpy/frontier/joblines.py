"""The job line: how a queued Job is written in the disk FIFOs, the spill files and the checkpoint.

One line per job, `priority\\tdepth\\thops\\turl\\n`. The hops field is `hops:tag:kind:retries`
when the job is tagged, a sitemap or a retry; lines of plain page jobs keep larbinpy's first
format, so state written by any larbinpy since then still loads. A job found on a page (`via`)
has `+` after its hops field and the page's URL as a field of its own before its URL:
`priority\\tdepth\\thops+\\tvia\\turl\\n` (lines without `+` read as before). The URL is last, so
it may hold any character but a newline (a tab included); `via` is a normalized URL, which holds
neither. `encode_jobs` runs for every URL pushed and `decode_job` for every URL popped: both stay
plain enough to be cheap on that path.
"""

from __future__ import annotations

from larbinpy.records import Job, JobKind

__all__ = ["decode_job", "encode_jobs"]

_VIA = "+\t"  # ends the hops field of a line with a via field


def _hops_field(job: Job) -> str:
    """`hops:tag:kind:retries`, the third field of a tagged, sitemap or retried job."""
    return f"{job.hops}:{job.tag}:{job.kind}:{job.retries}"


def encode_jobs(jobs: list[Job]) -> str:
    """Job lines as one string; ValueError for a URL with a newline, which would split its line."""
    text = "".join([
        f"{j.priority}\t{j.depth}\t{_hops_field(j) if j.tag or j.kind or j.retries else j.hops}"
        f"{'' if j.via is None else _VIA + j.via}\t{j.url}\n" for j in jobs])
    if text.count("\n") != len(jobs):
        raise ValueError("a job URL contains a newline")
    return text


def decode_job(line: bytes) -> Job:
    """One job line without its newline; ValueError when it is malformed."""
    priority, depth, hops, url = line.split(b"\t", 3)  # ValueError when fields are missing
    via = None
    if hops[-1:] == b"+":
        hops = hops[:-1]
        raw_via, url = url.split(b"\t", 1)
        via = raw_via.decode("utf-8", "surrogateescape")
    try:
        return Job(url.decode("utf-8", "surrogateescape"), int(depth), int(priority), int(hops),
                   via=via)
    except ValueError:  # the rare tagged, sitemap or retried job: only it pays for the split
        h, tag, kind, retries = hops.split(b":")
        return Job(url.decode("utf-8", "surrogateescape"), int(depth), int(priority), int(h),
                   int(tag), JobKind(int(kind)), int(retries), via)
