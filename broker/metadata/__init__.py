"""The cluster's metadata as etcd keeps it, sans-IO: the key layout and the rules (elections,
reassignments, placements), turned into a ``ClusterView``. One node reads its types too (a
topic's placement, the state topics' partitioner); broker/cluster does the etcd I/O.
"""
