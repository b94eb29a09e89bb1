"""larbin's main-loop stages, one module each, in pipeline order.

bandwidth (waitBandwidth) -> input -> sequencer -> dns (fetchDns) -> opener (fetchOpen; a
site's first fetch is its robots.txt, robots.py) -> reader (checkAll; sitemaps.py for sitemap
answers) -> parser (a loop turn's pages) -> links back to input, pages on to the outputs.
"""
