"""A seeded lite world: the SQLite schema and a generator of people, songs, messages, money and notes.

Everything here is invented for credo. A world is an in-memory SQLite database; tasks tweak it (tasks.py) and hand
it around as bytes (`Connection.serialize`), so a session's state is a value that can be copied and compared.
"""
import json
import random
import sqlite3

SCHEMA = """
CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT);
CREATE TABLE users (email TEXT PRIMARY KEY, first_name TEXT, last_name TEXT, phone_number TEXT UNIQUE);
CREATE TABLE accounts (app TEXT, email TEXT, password TEXT);
CREATE TABLE tokens (token TEXT PRIMARY KEY, app TEXT, email TEXT);
CREATE TABLE songs (song_id INTEGER PRIMARY KEY, title TEXT, artist TEXT, genre TEXT, duration_seconds INTEGER);
CREATE TABLE liked_songs (email TEXT, song_id INTEGER, liked_at TEXT);
CREATE TABLE playlists (playlist_id INTEGER PRIMARY KEY AUTOINCREMENT, owner_email TEXT, title TEXT, created_at TEXT);
CREATE TABLE playlist_songs (playlist_id INTEGER, song_id INTEGER, position INTEGER);
CREATE TABLE contacts (contact_id INTEGER PRIMARY KEY, owner_email TEXT, first_name TEXT, last_name TEXT,
                       phone_number TEXT, email TEXT, relationship TEXT);
CREATE TABLE messages (message_id INTEGER PRIMARY KEY AUTOINCREMENT, sender TEXT, receiver TEXT, content TEXT,
                       sent_at TEXT);
CREATE TABLE balances (email TEXT PRIMARY KEY, balance REAL);
CREATE TABLE transactions (transaction_id INTEGER PRIMARY KEY AUTOINCREMENT, sender_email TEXT, receiver_email TEXT,
                           amount REAL, description TEXT, created_at TEXT);
CREATE TABLE payment_requests (request_id INTEGER PRIMARY KEY AUTOINCREMENT, requester_email TEXT, payer_email TEXT,
                               amount REAL, description TEXT, status TEXT, created_at TEXT);
CREATE TABLE notes (note_id INTEGER PRIMARY KEY AUTOINCREMENT, owner_email TEXT, title TEXT, content TEXT, tags TEXT,
                    created_at TEXT);
CREATE TABLE task_status (completed INTEGER, answer TEXT, status TEXT);
"""
# Tables a task may change; the rest (meta, users, accounts, songs) are fixed; tokens and task_status are bookkeeping.
WORLD_TABLES = ("liked_songs", "playlists", "playlist_songs", "contacts", "messages", "balances", "transactions",
                "payment_requests", "notes")
APP_NAMES = ("music", "messages", "wallet", "notes")
NOW = "2024-04-01T09:00:00"

FIRST = ["Avery", "Blake", "Carmen", "Dario", "Elena", "Farid", "Greta", "Hugo", "Ines", "Jonas", "Kira", "Luca",
         "Mina", "Nolan", "Odile", "Priya", "Quentin", "Rosa", "Soren", "Talia"]
LAST = ["Abbott", "Brandt", "Castillo", "Dufresne", "Eriksen", "Fontaine", "Grady", "Holm", "Ivers", "Jablonski",
        "Kowal", "Lindqvist", "Marsh", "Novak"]
ADJECTIVES = ["Silver", "Midnight", "Golden", "Broken", "Quiet", "Electric", "Paper", "Wild", "Hollow", "Crimson",
              "Northern", "Velvet"]
NOUNS = ["River", "Skyline", "Echo", "Lantern", "Harbor", "Garden", "Signal", "Mirror", "Horizon", "Orchard",
         "Thunder", "Comet"]
ARTISTS = {"The Low Tides": "rock", "Mara Quinn": "pop", "Static Bloom": "rock", "Jonah Reyes": "hip hop",
           "Cold Harbor": "jazz", "Lila Moss": "country", "Brass Parade": "jazz", "Nova Hart": "pop",
           "Ilse Varga": "classical"}
PLAYLIST_TITLES = ["Morning Run", "Focus", "Road Trip", "Sunday Chill", "Throwbacks", "Party Mix"]
RELATIONSHIPS = ["friend", "coworker", "sibling", "parent", "roommate"]
MESSAGE_TEXTS = ["Are we still on for lunch?", "Running late, be there soon", "Did you see the game last night?",
                 "Can you send me the photos?", "Happy birthday!", "The meeting moved to 3pm", "Thanks for dinner!",
                 "Let's catch up this weekend", "Don't forget the concert on Friday", "Call me when you're free",
                 "I left my umbrella at your place", "Who is bringing dessert?"]
PAYMENT_TEXTS = ["Dinner", "Movie night", "Groceries", "Rent share", "Coffee", "Concert", "Taxi", "Gift", "Utilities"]
NOTE_TITLES = ["Grocery list", "Book ideas", "Trip plan", "Workout log", "Gift ideas", "Recipes to try",
               "Meeting notes", "Garden chores", "Podcast picks", "Packing list", "Budget", "Weekend plans"]
NOTE_TAGS = ["personal", "work", "travel", "shopping", "health", "ideas"]


def stamp(rng: random.Random, month: int = 3) -> str:
    """A time in the world's past (March 2024)."""
    return f"2024-{month:02d}-{rng.randint(1, 30):02d}T{rng.randint(7, 22):02d}:{rng.randint(0, 59):02d}:00"


def build_world(seed: int) -> sqlite3.Connection:
    rng = random.Random(seed)
    conn = sqlite3.connect(":memory:", check_same_thread=False)
    conn.executescript(SCHEMA)
    ins = lambda table, *row: conn.execute(f"INSERT INTO {table} VALUES ({', '.join('?' * len(row))})", row)  # noqa: E731
    firsts, lasts = rng.sample(FIRST, 12), rng.sample(LAST, 12)
    people = []
    for first, last in zip(firsts, lasts):
        email = f"{first}.{last}@lite.mail".lower()
        phone = f"555{rng.randint(1000000, 9999999)}"
        ins("users", email, first, last, phone)
        ins("balances", email, round(rng.uniform(300, 2000), 2))
        for app_name in APP_NAMES:
            ins("accounts", app_name, email, f"{app_name[:2]}-{rng.randint(100000, 999999)}")
        people.append((email, first, last, phone))
    me, others = people[0], people[1:]
    ins("meta", "now", NOW)
    ins("meta", "supervisor_email", me[0])
    ins("task_status", 0, None, None)

    artists = list(ARTISTS)
    titles = rng.sample([f"{a} {n}" for a in ADJECTIVES for n in NOUNS], 40)
    for song_id, title in enumerate(titles, start=1):
        artist = rng.choice(artists)
        genre = ARTISTS[artist] if rng.random() < 0.8 else rng.choice(sorted(set(ARTISTS.values())))
        ins("songs", song_id, title, artist, genre, rng.randint(120, 360))
    for email, count in ((me[0], 14), (others[0][0], 6)):
        for song_id in rng.sample(range(1, 41), count):
            ins("liked_songs", email, song_id, stamp(rng))
    for email, count in ((me[0], 3), (others[0][0], 1)):
        for title in rng.sample(PLAYLIST_TITLES, count):
            pid = conn.execute("INSERT INTO playlists (owner_email, title, created_at) VALUES (?, ?, ?)",
                               (email, title, stamp(rng, 2))).lastrowid
            for pos, song_id in enumerate(rng.sample(range(1, 41), rng.randint(4, 7))):
                ins("playlist_songs", pid, song_id, pos)

    for email, first, last, phone in others:
        conn.execute("INSERT INTO contacts (owner_email, first_name, last_name, phone_number, email, relationship) "
                     "VALUES (?, ?, ?, ?, ?, ?)", (me[0], first, last, phone, email, rng.choice(RELATIONSHIPS)))
    for _ in range(24):
        other = rng.choice(others)[3]
        sender, receiver = (other, me[3]) if rng.random() < 0.6 else (me[3], other)
        conn.execute("INSERT INTO messages (sender, receiver, content, sent_at) VALUES (?, ?, ?, ?)",
                     (sender, receiver, rng.choice(MESSAGE_TEXTS), stamp(rng)))
    for _ in range(18):
        other = rng.choice(others)[0]
        sender, receiver = (other, me[0]) if rng.random() < 0.5 else (me[0], other)
        conn.execute("INSERT INTO transactions (sender_email, receiver_email, amount, description, created_at) "
                     "VALUES (?, ?, ?, ?, ?)", (sender, receiver, round(rng.uniform(5, 120), 2),
                                                rng.choice(PAYMENT_TEXTS), stamp(rng)))
    for status in ["pending"] * 5 + ["approved", "denied"]:
        add_request(conn, rng, rng.choice(others)[0], me[0], round(rng.uniform(5, 150), 2), status)
    for title in rng.sample(NOTE_TITLES, 10):
        tags = rng.sample(NOTE_TAGS, rng.randint(1, 2))
        conn.execute("INSERT INTO notes (owner_email, title, content, tags, created_at) VALUES (?, ?, ?, ?, ?)",
                     (me[0], title, f"{title}:\n- first item\n- second item", json.dumps(tags), stamp(rng)))
    conn.commit()
    return conn


def add_request(conn, rng, requester, payer, amount, status="pending"):
    conn.execute("INSERT INTO payment_requests (requester_email, payer_email, amount, description, status, created_at) "
                 "VALUES (?, ?, ?, ?, ?, ?)", (requester, payer, amount, rng.choice(PAYMENT_TEXTS), status, stamp(rng)))


def supervisor(conn) -> dict:
    email = conn.execute("SELECT value FROM meta WHERE key = 'supervisor_email'").fetchone()[0]
    first, last, phone = conn.execute("SELECT first_name, last_name, phone_number FROM users WHERE email = ?",
                                      (email,)).fetchone()
    return {"first_name": first, "last_name": last, "email": email, "phone_number": phone}


def load(data: bytes) -> sqlite3.Connection:
    """A world from its serialized bytes (a private copy: changes to it do not touch `data`)."""
    conn = sqlite3.connect(":memory:", check_same_thread=False)
    conn.deserialize(data)
    return conn


def rows(conn, table: str) -> list:
    return sorted(conn.execute(f"SELECT * FROM {table}").fetchall(), key=repr)
