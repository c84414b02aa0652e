"""Network gateway: serves one aiohttp application over HTTP/1.1, h2c and HTTP/2 over TLS."""
