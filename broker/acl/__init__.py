"""Authorization: Kafka's ACL model (model.py, sans-IO) and the broker's authorizer."""
