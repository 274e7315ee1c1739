"""The broker's long-lived services that server.py builds once: the group and transaction
coordinators' runtimes, the transaction marker writer, the log cleaner and the long-poll waiters.
"""
