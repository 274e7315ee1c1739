"""What an operator watches and bounds: metrics (GET /metrics), the log set-up of `tmqgate
serve` (logs.py) and client quotas (quotas/). The rate-limited log (broker/ratelimit.py) is not
here: auth/ writes through it and metrics reads auth/'s failures, a cycle between packages.
"""
