"""The lite world's apps: supervisor, api_docs, music, messages, wallet, notes, over one SQLite database.

Written from scratch for credo (nothing of AppWorld's code or data): the surface imitates AppWorld's (calls as
`apis.<app>.<api>(**kwargs)`, a login per app returning an access token, paginated lists, API docs in the same
shape, HTTP-style errors raised as exceptions), the content is our own.

The registry, argument checks and `World` are in registry.py. This file runs in the world host (host.py), never in a cell: a cell's `apis` is a proxy (cell.py) whose calls
arrive here as (app, api, kwargs) JSON and are answered with JSON.
"""
import json

from envs.appworld.lite.registry import APPS, PAGE, REQUIRED, ApiError, _find, _login_api, _page, api, app

# ---- supervisor and api_docs ------------------------------------------------------------------------------------
app("supervisor", "The person you act for: their profile, their account passwords, and where to report the task done.")


@api("supervisor", "Show your supervisor's profile.", auth=False,
     returns='{"first_name": string, "last_name": string, "email": string, "phone_number": string}')
def show_profile(world, user):
    first, last, email, phone = world.one("SELECT first_name, last_name, email, phone_number FROM users WHERE email = ?",
                                          world.supervisor)
    return {"first_name": first, "last_name": last, "email": email, "phone_number": phone}


@api("supervisor", "Show your supervisor's passwords for every app.", auth=False,
     returns='[{"account_name": string, "password": string}]')
def show_account_passwords(world, user):
    return [{"account_name": a, "password": p} for a, p in
            world.all("SELECT app, password FROM accounts WHERE email = ? ORDER BY app", world.supervisor)]


@api("supervisor", "Mark the task complete. Give the answer when the task asks a question, else leave it None.",
     (("answer", "any", "the answer to the task's question, if it asks one", None, {}),
      ("status", "string", "success, or fail when the task cannot be done", "success", {"choices": ("success", "fail")})),
     auth=False, method="POST")
def complete_task(world, user, answer, status):
    if world.one("SELECT completed FROM task_status")[0]:
        raise ApiError(409, "the task is already complete")
    world.conn.execute("UPDATE task_status SET completed = 1, answer = ?, status = ?", (json.dumps(answer), status))


app("api_docs", "Documentation of every app and API in this world.")


@api("api_docs", "List the apps with a one-line description each.", auth=False,
     returns='[{"name": string, "description": string}]')
def show_app_descriptions(world, user):
    return [{"name": name, "description": a["description"]} for name, a in APPS.items()]


@api("api_docs", "List the APIs of one app with a one-line description each.",
     (("app_name", "string", "name of the app", REQUIRED, {}),), auth=False,
     returns='[{"name": string, "description": string}]')
def show_api_descriptions(world, user, app_name):
    if app_name not in APPS:
        raise ApiError(404, f"there is no app named {app_name!r}")
    return [{"name": n, "description": s["description"]} for n, s in APPS[app_name]["apis"].items()]


@api("api_docs", "Show the full documentation of one API: its parameters and what it returns.",
     (("app_name", "string", "name of the app", REQUIRED, {}), ("api_name", "string", "name of the API", REQUIRED, {})),
     auth=False, returns="the API's documentation")
def show_api_doc(world, user, app_name, api_name):
    spec = APPS.get(app_name, {}).get("apis", {}).get(api_name)
    if spec is None:
        raise ApiError(404, f"there is no API {app_name}.{api_name}")
    params = [{"name": n, "type": t, "required": d is REQUIRED, "description": h,
               "default": None if d is REQUIRED else d, "constraints": [f"{k} {v}" for k, v in c.items()]}
              for n, t, h, d, c in spec["params"]]
    return {"app_name": app_name, "api_name": api_name, "path": f"/{app_name}/{api_name}", "method": spec["method"],
            "description": spec["description"], "parameters": params,
            "response_schemas": {"success": spec["returns"], "failure": {"message": "string"}}}


# ---- music ------------------------------------------------------------------------------------------------------
app("music", "A music streaming app: a song catalogue, your liked songs and your playlists. Log in with your email.")
_login_api("music", "your email address")


def _song(row):
    return {"song_id": row[0], "title": row[1], "artist": row[2], "genre": row[3], "duration_seconds": row[4]}


_SONG_COLS = "s.song_id, s.title, s.artist, s.genre, s.duration_seconds"
_SONG = '{"song_id": integer, "title": string, "artist": string, "genre": string, "duration_seconds": integer}'


@api("music", "Search the song catalogue by words of the title or artist, optionally of one genre.",
     (("query", "string", "words to look for (empty: every song)", "", {}),
      ("genre", "string", "only songs of this genre", None, {})) + PAGE, auth=False, returns=f"[{_SONG}]")
def search_songs(world, user, query, genre, page_index, page_limit):
    rows = world.all(f"SELECT {_SONG_COLS} FROM songs s ORDER BY s.song_id")
    words = query.lower().split()
    rows = [r for r in rows if all(w in f"{r[1]} {r[2]}".lower() for w in words) and (genre is None or r[3] == genre)]
    return [_song(r) for r in _page(rows, page_index, page_limit)]


@api("music", "Show one song of the catalogue.", (("song_id", "integer", "the song", REQUIRED, {}),), auth=False,
     returns=_SONG)
def show_song(world, user, song_id):
    return _song(_find(world, f"SELECT {_SONG_COLS} FROM songs s WHERE s.song_id = ?", "song", song_id))


@api("music", "Show the songs you have liked, most recently liked first.", PAGE, returns=f"[{_SONG}]")
def show_liked_songs(world, user, page_index, page_limit):
    rows = world.all(f"SELECT {_SONG_COLS} FROM liked_songs l JOIN songs s ON s.song_id = l.song_id "
                     "WHERE l.email = ? ORDER BY l.liked_at DESC, s.song_id", user)
    return [_song(r) for r in _page(rows, page_index, page_limit)]


@api("music", "Like a song.", (("song_id", "integer", "the song", REQUIRED, {}),), method="POST")
def like_song(world, user, song_id):
    _find(world, "SELECT song_id FROM songs WHERE song_id = ?", "song", song_id)
    if world.one("SELECT 1 FROM liked_songs WHERE email = ? AND song_id = ?", user, song_id):
        raise ApiError(409, "you already like this song")
    world.conn.execute("INSERT INTO liked_songs VALUES (?, ?, ?)", (user, song_id, world.now))


@api("music", "Remove a song from your liked songs.", (("song_id", "integer", "the song", REQUIRED, {}),),
     method="DELETE")
def unlike_song(world, user, song_id):
    if not world.conn.execute("DELETE FROM liked_songs WHERE email = ? AND song_id = ?", (user, song_id)).rowcount:
        raise ApiError(404, "song not in your liked songs")


def _playlist(world, user, playlist_id):
    return _find(world, "SELECT playlist_id, title FROM playlists WHERE playlist_id = ? AND owner_email = ?",
                 "playlist", playlist_id, user)


@api("music", "Show your playlists (without their songs).", PAGE,
     returns='[{"playlist_id": integer, "title": string, "song_count": integer}]')
def show_playlists(world, user, page_index, page_limit):
    rows = world.all("SELECT p.playlist_id, p.title, (SELECT COUNT(*) FROM playlist_songs ps WHERE ps.playlist_id = "
                     "p.playlist_id) FROM playlists p WHERE p.owner_email = ? ORDER BY p.playlist_id", user)
    return [{"playlist_id": i, "title": t, "song_count": c} for i, t, c in _page(rows, page_index, page_limit)]


@api("music", "Show one of your playlists with its songs in order.",
     (("playlist_id", "integer", "the playlist", REQUIRED, {}),),
     returns=f'{{"playlist_id": integer, "title": string, "songs": [{_SONG}]}}')
def show_playlist(world, user, playlist_id):
    pid, title = _playlist(world, user, playlist_id)
    rows = world.all(f"SELECT {_SONG_COLS} FROM playlist_songs ps JOIN songs s ON s.song_id = ps.song_id "
                     "WHERE ps.playlist_id = ? ORDER BY ps.position", pid)
    return {"playlist_id": pid, "title": title, "songs": [_song(r) for r in rows]}


@api("music", "Create an empty playlist.", (("title", "string", "its title", REQUIRED, {}),), method="POST",
     returns='{"playlist_id": integer}')
def create_playlist(world, user, title):
    if not title.strip():
        raise ApiError(422, "the title must not be empty")
    cur = world.conn.execute("INSERT INTO playlists (owner_email, title, created_at) VALUES (?, ?, ?)",
                             (user, title, world.now))
    return {"playlist_id": cur.lastrowid}


@api("music", "Add a song at the end of one of your playlists.",
     (("playlist_id", "integer", "the playlist", REQUIRED, {}), ("song_id", "integer", "the song", REQUIRED, {})),
     method="POST")
def add_song_to_playlist(world, user, playlist_id, song_id):
    _playlist(world, user, playlist_id)
    _find(world, "SELECT song_id FROM songs WHERE song_id = ?", "song", song_id)
    if world.one("SELECT 1 FROM playlist_songs WHERE playlist_id = ? AND song_id = ?", playlist_id, song_id):
        raise ApiError(409, "the song is already in this playlist")
    last = world.one("SELECT COALESCE(MAX(position), -1) FROM playlist_songs WHERE playlist_id = ?", playlist_id)[0]
    world.conn.execute("INSERT INTO playlist_songs VALUES (?, ?, ?)", (playlist_id, song_id, last + 1))


@api("music", "Remove a song from one of your playlists.",
     (("playlist_id", "integer", "the playlist", REQUIRED, {}), ("song_id", "integer", "the song", REQUIRED, {})),
     method="DELETE")
def remove_song_from_playlist(world, user, playlist_id, song_id):
    _playlist(world, user, playlist_id)
    if not world.conn.execute("DELETE FROM playlist_songs WHERE playlist_id = ? AND song_id = ?",
                              (playlist_id, song_id)).rowcount:
        raise ApiError(404, "song not in this playlist")


@api("music", "Delete one of your playlists.", (("playlist_id", "integer", "the playlist", REQUIRED, {}),),
     method="DELETE")
def delete_playlist(world, user, playlist_id):
    _playlist(world, user, playlist_id)
    world.conn.execute("DELETE FROM playlist_songs WHERE playlist_id = ?", (playlist_id,))
    world.conn.execute("DELETE FROM playlists WHERE playlist_id = ?", (playlist_id,))


# ---- messages ---------------------------------------------------------------------------------------------------
app("messages", "Your phone: contacts and text messages. Log in with your phone number.")
_login_api("messages", "your phone number")
_CONTACT = ('{"contact_id": integer, "first_name": string, "last_name": string, "phone_number": string, '
            '"email": string, "relationship": string}')


@api("messages", "Show your contacts, optionally only those matching a name or of one relationship.",
     (("query", "string", "words of the name (empty: everyone)", "", {}),
      ("relationship", "string", "e.g. friend, coworker, sibling, parent, roommate", None, {})) + PAGE,
     returns=f"[{_CONTACT}]")
def show_contacts(world, user, query, relationship, page_index, page_limit):
    rows = world.all("SELECT contact_id, first_name, last_name, phone_number, email, relationship FROM contacts "
                     "WHERE owner_email = ? ORDER BY contact_id", user)
    words = query.lower().split()
    rows = [r for r in rows if all(w in f"{r[1]} {r[2]}".lower() for w in words)
            and (relationship is None or r[5] == relationship)]
    keys = ("contact_id", "first_name", "last_name", "phone_number", "email", "relationship")
    return [dict(zip(keys, r)) for r in _page(rows, page_index, page_limit)]


@api("messages", "Show your text messages (sent and received), newest first, optionally with one phone number.",
     (("phone_number", "string", "only messages to or from this number", None, {}),
      ("query", "string", "only messages containing these words", "", {})) + PAGE,
     returns='[{"message_id": integer, "sender": string, "receiver": string, "content": string, "sent_at": string}]')
def show_messages(world, user, phone_number, query, page_index, page_limit):
    me = world.one("SELECT phone_number FROM users WHERE email = ?", user)[0]
    rows = world.all("SELECT message_id, sender, receiver, content, sent_at FROM messages WHERE sender = ? OR "
                     "receiver = ? ORDER BY sent_at DESC, message_id DESC", me, me)
    words = query.lower().split()
    rows = [r for r in rows if (phone_number is None or phone_number in (r[1], r[2]))
            and all(w in r[3].lower() for w in words)]
    keys = ("message_id", "sender", "receiver", "content", "sent_at")
    return [dict(zip(keys, r)) for r in _page(rows, page_index, page_limit)]


@api("messages", "Send a text message.", (("phone_number", "string", "the receiver's number", REQUIRED, {}),
                                          ("content", "string", "the text", REQUIRED, {})),
     method="POST", returns='{"message_id": integer}')
def send_message(world, user, phone_number, content):
    _find(world, "SELECT email FROM users WHERE phone_number = ?", "phone number", phone_number)
    if not content.strip():
        raise ApiError(422, "the message must not be empty")
    me = world.one("SELECT phone_number FROM users WHERE email = ?", user)[0]
    cur = world.conn.execute("INSERT INTO messages (sender, receiver, content, sent_at) VALUES (?, ?, ?, ?)",
                             (me, phone_number, content, world.now))
    return {"message_id": cur.lastrowid}


@api("messages", "Delete one of your messages.", (("message_id", "integer", "the message", REQUIRED, {}),),
     method="DELETE")
def delete_message(world, user, message_id):
    me = world.one("SELECT phone_number FROM users WHERE email = ?", user)[0]
    _find(world, "SELECT 1 FROM messages WHERE message_id = ? AND (sender = ? OR receiver = ?)", "message",
          message_id, me, me)
    world.conn.execute("DELETE FROM messages WHERE message_id = ?", (message_id,))


# ---- wallet -----------------------------------------------------------------------------------------------------
app("wallet", "A payments app: your balance, money sent and received, and payment requests. Log in with your email.")
_login_api("wallet", "your email address")
_TRANSACTION = ('{"transaction_id": integer, "sender_email": string, "receiver_email": string, "amount": number, '
                '"description": string, "created_at": string}')


@api("wallet", "Show your balance.", returns='{"balance": number}')
def show_balance(world, user):
    return {"balance": world.one("SELECT balance FROM balances WHERE email = ?", user)[0]}


@api("wallet", "Show your transactions, newest first.",
     (("direction", "string", "sent or received (default: both)", None, {"choices": ("sent", "received", None)}),)
     + PAGE, returns=f"[{_TRANSACTION}]")
def show_transactions(world, user, direction, page_index, page_limit):
    rows = world.all("SELECT transaction_id, sender_email, receiver_email, amount, description, created_at FROM "
                     "transactions WHERE sender_email = ? OR receiver_email = ? ORDER BY created_at DESC, "
                     "transaction_id DESC", user, user)
    rows = [r for r in rows if direction is None or (r[1] == user) == (direction == "sent")]
    keys = ("transaction_id", "sender_email", "receiver_email", "amount", "description", "created_at")
    return [dict(zip(keys, r)) for r in _page(rows, page_index, page_limit)]


def _pay(world, user, receiver, amount, description):
    balance = world.one("SELECT balance FROM balances WHERE email = ?", user)[0]
    if amount > balance + 1e-9:
        raise ApiError(422, f"insufficient balance ({balance:.2f})")
    world.conn.execute("UPDATE balances SET balance = ROUND(balance - ?, 2) WHERE email = ?", (amount, user))
    world.conn.execute("UPDATE balances SET balance = ROUND(balance + ?, 2) WHERE email = ?", (amount, receiver))
    cur = world.conn.execute("INSERT INTO transactions (sender_email, receiver_email, amount, description, created_at) "
                             "VALUES (?, ?, ?, ?, ?)", (user, receiver, amount, description, world.now))
    return cur.lastrowid


@api("wallet", "Send money to another wallet user.",
     (("receiver_email", "string", "the receiver's email", REQUIRED, {}),
      ("amount", "number", "amount in dollars", REQUIRED, {"ge": 0.01}),
      ("description", "string", "what it is for", "", {})), method="POST", returns='{"transaction_id": integer}')
def send_money(world, user, receiver_email, amount, description):
    _find(world, "SELECT email FROM balances WHERE email = ?", "wallet user", receiver_email)
    if receiver_email == user:
        raise ApiError(422, "you cannot send money to yourself")
    return {"transaction_id": _pay(world, user, receiver_email, round(amount, 2), description)}


@api("wallet", "Show payment requests others sent you.",
     (("status", "string", "pending, approved or denied (default: all)", None,
       {"choices": ("pending", "approved", "denied", None)}),) + PAGE,
     returns='[{"request_id": integer, "requester_email": string, "amount": number, "description": string, '
             '"status": string, "created_at": string}]')
def show_payment_requests(world, user, status, page_index, page_limit):
    rows = world.all("SELECT request_id, requester_email, amount, description, status, created_at FROM "
                     "payment_requests WHERE payer_email = ? ORDER BY request_id", user)
    rows = [r for r in rows if status is None or r[4] == status]
    keys = ("request_id", "requester_email", "amount", "description", "status", "created_at")
    return [dict(zip(keys, r)) for r in _page(rows, page_index, page_limit)]


def _pending_request(world, user, request_id):
    row = _find(world, "SELECT requester_email, amount, description, status FROM payment_requests WHERE "
                "request_id = ? AND payer_email = ?", "payment request", request_id, user)
    if row[3] != "pending":
        raise ApiError(409, f"this request is already {row[3]}")
    return row


@api("wallet", "Approve (pay) a pending payment request.", (("request_id", "integer", "the request", REQUIRED, {}),),
     method="POST", returns='{"transaction_id": integer}')
def approve_payment_request(world, user, request_id):
    requester, amount, description, _ = _pending_request(world, user, request_id)
    tid = _pay(world, user, requester, amount, description)
    world.conn.execute("UPDATE payment_requests SET status = 'approved' WHERE request_id = ?", (request_id,))
    return {"transaction_id": tid}


@api("wallet", "Deny a pending payment request.", (("request_id", "integer", "the request", REQUIRED, {}),),
     method="POST")
def deny_payment_request(world, user, request_id):
    _pending_request(world, user, request_id)
    world.conn.execute("UPDATE payment_requests SET status = 'denied' WHERE request_id = ?", (request_id,))


# ---- notes ------------------------------------------------------------------------------------------------------
app("notes", "A notes app: notes with a title, text content and tags. Log in with your email.")
_login_api("notes", "your email address")


@api("notes", "Show your notes (title and tags, not the content), optionally matching words or with one tag.",
     (("query", "string", "words of the title (empty: every note)", "", {}),
      ("tag", "string", "only notes with this tag", None, {})) + PAGE,
     returns='[{"note_id": integer, "title": string, "tags": [string], "created_at": string}]')
def show_notes(world, user, query, tag, page_index, page_limit):
    rows = world.all("SELECT note_id, title, tags, created_at FROM notes WHERE owner_email = ? ORDER BY note_id", user)
    words = query.lower().split()
    rows = [r for r in rows if all(w in r[1].lower() for w in words) and (tag is None or tag in json.loads(r[2]))]
    return [{"note_id": i, "title": t, "tags": json.loads(g), "created_at": c}
            for i, t, g, c in _page(rows, page_index, page_limit)]


@api("notes", "Show one note with its content.", (("note_id", "integer", "the note", REQUIRED, {}),),
     returns='{"note_id": integer, "title": string, "content": string, "tags": [string]}')
def show_note(world, user, note_id):
    i, t, c, g = _find(world, "SELECT note_id, title, content, tags FROM notes WHERE note_id = ? AND owner_email = ?",
                       "note", note_id, user)
    return {"note_id": i, "title": t, "content": c, "tags": json.loads(g)}


@api("notes", "Create a note.", (("title", "string", "its title", REQUIRED, {}),
                                 ("content", "string", "its text", "", {}),
                                 ("tags", "list[string]", "its tags", None, {})),
     method="POST", returns='{"note_id": integer}')
def create_note(world, user, title, content, tags):
    if not title.strip():
        raise ApiError(422, "the title must not be empty")
    cur = world.conn.execute("INSERT INTO notes (owner_email, title, content, tags, created_at) VALUES (?, ?, ?, ?, ?)",
                             (user, title, content, json.dumps(tags or []), world.now))
    return {"note_id": cur.lastrowid}


@api("notes", "Change a note's title, content or tags (those given).",
     (("note_id", "integer", "the note", REQUIRED, {}), ("title", "string", "new title", None, {}),
      ("content", "string", "new content", None, {}), ("tags", "list[string]", "new tags", None, {})), method="PATCH")
def update_note(world, user, note_id, title, content, tags):
    _find(world, "SELECT 1 FROM notes WHERE note_id = ? AND owner_email = ?", "note", note_id, user)
    for column, value in (("title", title), ("content", content), ("tags", None if tags is None else json.dumps(tags))):
        if value is not None:
            world.conn.execute(f"UPDATE notes SET {column} = ? WHERE note_id = ?", (value, note_id))


@api("notes", "Delete a note.", (("note_id", "integer", "the note", REQUIRED, {}),), method="DELETE")
def delete_note(world, user, note_id):
    _find(world, "SELECT 1 FROM notes WHERE note_id = ? AND owner_email = ?", "note", note_id, user)
    world.conn.execute("DELETE FROM notes WHERE note_id = ?", (note_id,))
