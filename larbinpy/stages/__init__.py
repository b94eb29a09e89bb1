"""larbin's main-loop stages, one module each, in pipeline order.

bandwidth (waitBandwidth) -> input -> sequencer -> dns (fetchDns, then robots.txt) ->
opener (fetchOpen) -> reader (checkAll) -> parser (a loop turn's pages) -> links back to
input, pages on to the outputs.
"""
