"""Who a connection is: its ClientInfo (client.py, `current_client`, set as each connection
starts) and the principal of a TLS client certificate (principal.py, ssl.principal.mapping.rules).
Imports nothing of the broker: everything else may read it.
"""
