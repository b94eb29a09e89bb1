"""larbin's main-loop stages, one module each, in pipeline order.

bandwidth (waitBandwidth) -> input -> sequencer -> dns (fetchDns, then robots.txt) ->
opener (fetchOpen) -> reader (checkAll) -> links back to input.
"""
