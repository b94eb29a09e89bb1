"""`larbinpy bench` (the `bench` extra): a synthetic web served on loopback and the
measurements of a crawl of it against a bare fetch loop, one node or several."""
