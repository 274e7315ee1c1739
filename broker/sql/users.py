"""GRANT / REVOKE and CREATE / ALTER USER: the broker's Kafka ACLs and SASL users, through SQL.

Rules: both need the broker's authorizer (`authorizer = "acl"`): without one they are refused,
never ignored; the change itself is the authorizer's (`Access.grant`, `Access.set_password`),
so SQL and Kafka's admin APIs keep one set of ACLs and credentials.
"""

from __future__ import annotations

from tmqgate.broker.sql import ast
from tmqgate.broker.sql.access import Caller
from tmqgate.broker.sql.ast import SqlError
from tmqgate.broker.sql.context import SqlContext
from tmqgate.broker.sql.result import Result


def grant(sql: SqlContext, stmt: ast.Grant, _db: str | None, _caller: Caller) -> Result:
    if sql.access is None:
        raise SqlError('GRANT and REVOKE need the broker\'s authorizer (authorizer = "acl")')
    if sql.topics.get(stmt.db) is None:
        raise SqlError(f"Database not exist: {stmt.db}")
    sql.access.grant(stmt.privilege, stmt.db, stmt.user, stmt.revoke)
    return Result.affected(0)


def user_password(sql: SqlContext, stmt: ast.UserPassword, _db: str | None, _caller: Caller) -> Result:
    if sql.access is None:
        raise SqlError('CREATE USER and ALTER USER need the broker\'s authorizer (authorizer = "acl")')
    sql.access.set_password(stmt.user, stmt.password, stmt.create)
    return Result.affected(0)
