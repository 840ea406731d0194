"""How the lite world's apps are declared and called: the API registry (`@api`, `app`), argument checking, the
per-task `World` (one SQLite database) and the helpers every app shares (paging, lookups, the login API).

The apps themselves are in apps.py; host.py answers a cell's (app, api, kwargs) JSON with `World.call`.
"""
import json
import secrets

REQUIRED = object()
APPS = {}  # app name -> {"description": str, "apis": {api name: spec}}
PAGE = (("page_index", "integer", "index of the page of results", 0, {"ge": 0}),
        ("page_limit", "integer", "results per page", 5, {"ge": 1, "le": 20}))


class ApiError(Exception):
    """What a failed API call raises in the model's code: the status code and a JSON message, as a web API would."""

    def __init__(self, status: int, message: str):
        super().__init__(f"Response status code is {status}:\n{json.dumps({'message': message})}")
        self.status, self.message = status, message


def api(app: str, description: str, params=(), auth: bool = True, method: str = "GET", returns: str = "null"):
    """Register a handler fn(world, user, **kwargs) as apis.<app>.<name>; `params`: (name, type, description,
    default or REQUIRED, constraints)."""
    def wrap(fn):
        full = ((("access_token", "string", f"access token from apis.{app}.login", REQUIRED, {}),) if auth else ())
        APPS[app]["apis"][fn.__name__] = {"fn": fn, "description": description, "auth": auth, "method": method,
                                          "params": full + tuple(params), "returns": returns}
        return fn
    return wrap


def app(name: str, description: str):
    APPS[name] = {"description": description, "apis": {}}


_TYPES = {"string": (str,), "integer": (int,), "number": (int, float), "boolean": (bool,), "list[string]": (list,),
          "any": (str, int, float, bool, list, dict, type(None))}


SQLITE_INT = (-(1 << 63), (1 << 63) - 1)  # SQLite's INTEGER is 64-bit: a larger int cannot even be bound to a query


def _check_storable(name: str, value):
    """422 for a value JSON can carry but SQLite cannot take: an int past 64 bits, text with a lone surrogate
    (JSON's "\\ud800" escape; SQLite binds text as UTF-8). Unchecked, either raised in the world host mid-call."""
    if isinstance(value, int) and not SQLITE_INT[0] <= value <= SQLITE_INT[1]:
        raise ApiError(422, f"parameter {name!r} must be an integer from -2**63 to 2**63-1 (SQLite's range)")
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise ApiError(422, f"parameter {name!r} must be valid Unicode text: {exc.reason} at position "
                                f"{exc.start}") from None


def _check(spec: dict, kwargs: dict) -> dict:
    """Validated arguments with defaults filled in; ApiError 422 on unknown, missing, mistyped or out-of-range ones."""
    known = {p[0]: p for p in spec["params"]}
    for name in kwargs:
        if name not in known:
            raise ApiError(422, f"unexpected parameter {name!r}; the parameters are {sorted(known)}")
    out = {}
    for name, kind, _, default, limits in spec["params"]:
        if name not in kwargs:
            if default is REQUIRED:
                raise ApiError(422, f"missing required parameter {name!r}")
            out[name] = default
            continue
        value = kwargs[name]
        ok = value is None and default is None or isinstance(value, _TYPES[kind]) and \
            not (kind in ("integer", "number") and isinstance(value, bool))
        if ok and kind == "list[string]" and value is not None:
            ok = all(isinstance(v, str) for v in value)
        if not ok:
            raise ApiError(422, f"parameter {name!r} must be of type {kind}, got {type(value).__name__}")
        if kind != "any":  # "any" is stored as JSON text, which holds any JSON value
            for item in value if isinstance(value, list) else (value,):
                _check_storable(name, item)
        if value is not None and ("ge" in limits and value < limits["ge"] or "le" in limits and value > limits["le"]):
            raise ApiError(422, f"parameter {name!r} must be in [{limits.get('ge', '-inf')}, {limits.get('le', 'inf')}]")
        if "choices" in limits and value not in limits["choices"]:
            raise ApiError(422, f"parameter {name!r} must be one of {list(limits['choices'])}")
        out[name] = value
    return out


class World:
    """The database of one task's world; `now` is the world's fixed clock."""

    def __init__(self, conn):
        self.conn = conn
        self.now = self.one("SELECT value FROM meta WHERE key = 'now'")[0]
        self.supervisor = self.one("SELECT value FROM meta WHERE key = 'supervisor_email'")[0]

    def one(self, sql, *args):
        return self.conn.execute(sql, args).fetchone()

    def all(self, sql, *args):
        return self.conn.execute(sql, args).fetchall()

    def call(self, app_name: str, api_name: str, kwargs: dict):
        if app_name not in APPS:
            raise ApiError(404, f"there is no app named {app_name!r}")
        spec = APPS[app_name]["apis"].get(api_name)
        if spec is None:
            raise ApiError(404, f"app {app_name!r} has no API named {api_name!r}")
        args = _check(spec, kwargs)
        user = None
        if spec["auth"]:
            row = self.one("SELECT email FROM tokens WHERE token = ? AND app = ?", args.pop("access_token"), app_name)
            if row is None:
                raise ApiError(401, f"invalid or missing access token for {app_name}: log in with apis.{app_name}.login")
            user = row[0]
        with self.conn:  # one transaction per call: a failed call changes nothing
            result = spec["fn"](self, user, **args)
        return json.loads(json.dumps(result))  # plain data only, no live objects


def _page(rows, page_index, page_limit):
    return rows[page_index * page_limit:(page_index + 1) * page_limit]


def _find(world, sql, what, *args):
    row = world.one(sql, *args)
    if row is None:
        raise ApiError(404, f"{what} not found")
    return row


def _login(world, app_name, username, password):
    row = world.one("SELECT a.email FROM accounts a JOIN users u ON u.email = a.email WHERE a.app = ? AND a.password = ?"
                    " AND (u.email = ? OR u.phone_number = ?)", app_name, password, username, username)
    if row is None:
        raise ApiError(401, "wrong username or password")
    token = secrets.token_hex(12)
    world.conn.execute("INSERT INTO tokens VALUES (?, ?, ?)", (token, app_name, row[0]))
    return {"access_token": token, "token_type": "Bearer"}


def _login_api(app_name, username_help):
    def login(world, user, username, password):
        return _login(world, app_name, username, password)
    api(app_name, "Log in and get an access token for the other APIs of this app.",
        (("username", "string", username_help, REQUIRED, {}), ("password", "string", "account password", REQUIRED, {})),
        auth=False, method="POST", returns='{"access_token": string, "token_type": string}')(login)
