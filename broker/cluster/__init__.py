"""A tmqgate cluster coordinated by etcd (issue 16): membership, the controller (step 1).

Used only with ``serve --cluster etcd://…``; one node without it never imports this package.
"""
