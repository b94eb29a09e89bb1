"""Talking to web servers: the HTTP clients, the HTTP/1.1 reader, body decoding under limits,
cookies, back-off after 429/503, and the network policy every connection must pass."""
