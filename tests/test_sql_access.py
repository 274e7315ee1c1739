"""broker/sql/access.py's table covers the SQL front whole (issue 25, point 4): every statement
class of broker/sql/ast.py and every SHOW kind has an entry naming the ACL it needs, every
route of the HTTP front has one in broker/network/http.py's PATH_NEEDS — so a new statement or path
cannot ship without one — and a statement without one is refused, not let through."""

from __future__ import annotations

import inspect
import typing
from dataclasses import dataclass

from tmqgate.broker.network.http import PATH_NEEDS, make_app
from tmqgate.broker.sql import access, ast
from tmqgate.broker.sql.parser import parse


def _statement_classes() -> list[type[ast.Statement]]:
    return [cls for _, cls in inspect.getmembers(ast, inspect.isclass)
            if issubclass(cls, ast.Statement) and cls is not ast.Statement and cls.__module__ == ast.__name__]


def test_every_statement_class_has_an_entry() -> None:
    classes = _statement_classes()
    assert ast.CreateDatabase in classes and ast.DropConsumerGroup in classes  # the walk finds them
    missing = [cls.__name__ for cls in classes if cls not in access.STATEMENTS]
    assert not missing, f"statements with no entry in broker/sql/access.py's STATEMENTS: {missing}"
    assert set(access.STATEMENTS) <= set(classes)  # and nothing stale


def test_every_show_kind_has_an_entry() -> None:
    kinds = set(typing.get_args(typing.get_type_hints(ast.Show)["what"]))
    assert kinds and kinds == set(access.SHOWS), kinds ^ set(access.SHOWS)


def test_every_http_route_has_an_entry() -> None:
    app = make_app(None, None, None, 1, metrics=object())  # type: ignore[arg-type]  # routes only
    routes = {resource.canonical for resource in app.router.resources()}
    assert "/metrics" in routes and "/log-history" in routes
    assert routes == set(PATH_NEEDS), routes ^ set(PATH_NEEDS)


@dataclass
class _Unlisted(ast.Statement):
    """A statement the table does not know (as a new one would be before its entry)."""


class _AllowAll:
    def allows(self, caller: access.Caller, operation: str, resource_type: str, name: str) -> bool:
        return True

    def grant(self, privilege: str, db: str, user: str, revoke: bool) -> None: ...

    def set_password(self, user: str, password: str, create: bool) -> None: ...


def test_a_statement_with_no_entry_is_refused() -> None:
    why = access.refusal(_AllowAll(), access.Caller(), _Unlisted(), None)
    assert why == "Permission denied: no access rule for the statement _Unlisted"


def test_needs_in_kafkas_terms() -> None:
    # OffsetDelete's: DELETE on the group, READ on the topic whose offsets go
    assert access.needs(parse("DROP CONSUMER GROUP ga ON a"), None) == [
        (("DELETE", "GROUP", "ga"),), (("READ", "TOPIC", "a"),)]
    assert access.needs(parse("USE power"), None) == [(("DESCRIBE", "TOPIC", "power"),)]
    assert access.needs(parse("SHOW power.STABLES"), None) == [(("DESCRIBE", "TOPIC", "power"),)]
    assert access.needs(parse("SHOW TABLES"), "power") == [(("DESCRIBE", "TOPIC", "power"),)]
    for listing in ("DATABASES", "TOPICS", "CONSUMERS", "SUBSCRIPTIONS", "DNODES"):  # filtered instead
        assert access.needs(parse(f"SHOW {listing}"), None) == []
