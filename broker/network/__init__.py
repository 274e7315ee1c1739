"""The broker's network side: the Kafka listeners (listeners.py), one connection served
(connection.py), the request memory pool and connection caps (limits.py) and the HTTP front
(http.py). The composition root (server.py) builds what they are given.
"""
