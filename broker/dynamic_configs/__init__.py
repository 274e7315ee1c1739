"""Configs altered at run time through DescribeConfigs / AlterConfigs /
IncrementalAlterConfigs: dynamic broker configs (broker_configs.py), group configs
(group_configs.py) and the loggers' levels (logger_configs.py). Above the topic registry.
"""
