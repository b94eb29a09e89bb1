"""What is left to crawl and what was seen: the seen-set, the priority FIFOs on disk, the
per-site queues with their politeness clocks, and the state directory that checkpoints them."""
