"""The SQL front's access to the authorizer (broker/sql/access.py's `Access`): the decision
for a SQL caller, TDengine's GRANT / REVOKE as Kafka ACLs, and CREATE / ALTER USER handed to
the SASL credentials store when the broker has one (`set_user_password`)."""

from __future__ import annotations

from collections.abc import Callable

from tmqgate.broker.acl.authorizer import Authorizer
from tmqgate.broker.acl.model import AclBinding, AclFilter, Operation, PatternType, Permission, ResourceType
from tmqgate.broker.tdengine import Caller, SqlError

# TDengine's privileges on a database, as the Kafka operation allowed on its topic.
PRIVILEGES = {"read": Operation.READ, "write": Operation.WRITE, "all": Operation.ALL}


class SqlAccess:
    """See the module docstring. `set_user_password(user, password, create)` is the SASL
    credentials store's (None until the broker has one: CREATE / ALTER USER are refused)."""

    def __init__(self, authorizer: Authorizer,
                 set_user_password: Callable[[str, str, bool], None] | None = None) -> None:
        self.authorizer = authorizer
        self.set_user_password = set_user_password

    def allows(self, caller: Caller, operation: str, resource_type: str, name: str) -> bool:
        return bool(self.authorizer.authorize(caller.principal, caller.host, Operation[operation],
                                              ResourceType[resource_type], (name,)))

    def grant(self, privilege: str, db: str, user: str, revoke: bool) -> None:
        """GRANT p ON db.* TO user: ALLOW p on topic db (LITERAL, any host) for User:user;
        REVOKE removes that ACL."""
        acl = AclBinding(ResourceType.TOPIC, db, PatternType.LITERAL, f"User:{user}", "*",
                         PRIVILEGES[privilege], Permission.ALLOW)
        if revoke:
            self.authorizer.delete([AclFilter(*acl)])
        else:
            [error] = self.authorizer.create([acl])
            if error is not None:
                raise SqlError(error)

    def set_password(self, user: str, password: str, create: bool) -> None:
        if self.set_user_password is None:
            raise SqlError("CREATE USER and ALTER USER need the SASL credentials store, which this "
                           "broker does not have yet")
        self.set_user_password(user, password, create)
