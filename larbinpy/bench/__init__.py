"""`larbinpy bench` (the `bench` extra): a synthetic web served on loopback and the
measurements of a crawl of it against a bare fetch loop, one node or several.

`measure.py` is the command, `harness.py` runs the synthetic web (`synth.py`) as a child process,
`cluster.py` measures clusters of nodes (on `localredis.py`), `micro.py` single structures.
"""
