"""HTTP transport: HTTP/1.1 connections, the HTTP/2 session and streams, one port for both.

Imports nothing of the gateway above it (api, produce, auth, app): what a connection hands a
request to is given to it at startup."""
