"""The lite tasks: 10 scenarios x 3 seeded tasks, each with an instruction, a seeded world, named state-based checks
and a reference solution.

A scenario is one task template; its tasks `<scenario>_<n>` (n = 1..3) instantiate it on differently seeded worlds,
as AppWorld's scenarios do. Splits are by scenario (train 4 scenarios, dev 2, test 4) and every split has every
difficulty it can. Checks are of two kinds, as in AppWorld's evaluators: what the task asked (the answer, the
requested change) and no collateral damage (nothing else in the world changed), written with checks.py's helpers.
Everything here is invented.
"""
import json
import random
import zlib
from collections import Counter
from dataclasses import dataclass
from functools import cache

from envs.appworld.lite.checks import Ctx, answer_is, close, kept_rows, new_rows, q, unchanged_except
from envs.appworld.lite.world import (
    add_request,
    build_world,
    load,
    rows,
    stamp,
    supervisor,
)

SPLITS = ("train", "dev", "test")
SCENARIOS = {}  # name -> (difficulty, split, make(conn, rng, me) -> (instruction, checks, solution cell))
PRELUDE = '''me = apis.supervisor.show_profile()
passwords = {a["account_name"]: a["password"] for a in apis.supervisor.show_account_passwords()}
tokens = {
    "music": apis.music.login(username=me["email"], password=passwords["music"])["access_token"],
    "messages": apis.messages.login(username=me["phone_number"], password=passwords["messages"])["access_token"],
    "wallet": apis.wallet.login(username=me["email"], password=passwords["wallet"])["access_token"],
    "notes": apis.notes.login(username=me["email"], password=passwords["notes"])["access_token"],
}


def all_pages(api, **kwargs):
    items, page = [], 0
    while True:
        batch = api(page_index=page, page_limit=20, **kwargs)
        items += batch
        if len(batch) < 20:
            return items
        page += 1
'''


@dataclass(frozen=True)
class Task:
    task_id: str
    scenario: str
    difficulty: int
    split: str
    instruction: str
    checks: tuple        # ((name, fn(Ctx) -> bool), ...)
    solution: tuple      # reference solution: the code cells, in order
    db: bytes            # the seeded world


def scenario(name: str, difficulty: int, split: str):
    def wrap(make):
        SCENARIOS[name] = (difficulty, split, make)
        return make
    return wrap


def task_ids(split: str = None) -> list:
    return [f"{name}_{n}" for name, (_, s, _) in SCENARIOS.items() if split in (None, s) for n in (1, 2, 3)]


@cache
def load_task(task_id: str) -> Task:
    name, _, n = task_id.rpartition("_")
    if name not in SCENARIOS or n not in ("1", "2", "3"):
        raise KeyError(f"no lite AppWorld task {task_id!r}")
    difficulty, split, make = SCENARIOS[name]
    seed = zlib.crc32(task_id.encode())
    conn = build_world(seed)
    instruction, checks, cell = make(conn, random.Random(seed + 1), supervisor(conn)["email"])
    conn.commit()
    return Task(task_id, name, difficulty, split, instruction, tuple(checks), (PRELUDE, cell), conn.serialize())


def evaluate(task: Task, db: bytes, connect=load) -> dict:
    """AppWorld's test-tracker shape: success, pass_count, num_tests, passes, failures, difficulty.

    Trusted code on a database that may not be: run it in the world host (host.py), which passes a `connect`
    that aborts slow queries and checks the schema first."""
    after = connect(db)
    done, answer = after.execute("SELECT completed, answer FROM task_status").fetchone()
    ctx = Ctx(connect(task.db), after, json.loads(answer) if done and answer else None, supervisor(after)["email"])
    passes, failures = [], []
    for name, check in task.checks:
        try:
            ok = bool(check(ctx))
        except Exception as exc:  # a malformed state the check did not expect fails it
            ok, name = False, f"{name} ({type(exc).__name__}: {exc})"
        (passes if ok else failures).append(name)
    n = len(task.checks)
    return {"success": not failures, "pass_count": len(passes), "num_tests": n, "passes": passes,
            "failures": failures, "difficulty": task.difficulty}


# ---- scenarios ----------------------------------------------------------------------------------------------------
@scenario("music_liked_genre", 1, "train")
def _liked_genre(conn, rng, me):
    counts = Counter(g for (g,) in q(conn, "SELECT s.genre FROM liked_songs l JOIN songs s USING (song_id) "
                                           "WHERE l.email = ?", me))
    genre = rng.choice(sorted(g for g, n in counts.items() if n >= 2))
    cell = (f'liked = all_pages(apis.music.show_liked_songs, access_token=tokens["music"])\n'
            f'apis.supervisor.complete_task(answer=sum(song["genre"] == {genre!r} for song in liked))\n')
    return (f"How many of the songs I have liked in the music app are {genre} songs?",
            [("answer_correct", answer_is(counts[genre])), ("no_changes", unchanged_except())], cell)


@scenario("music_artist_playlist", 2, "train")
def _artist_playlist(conn, rng, me):
    artist = rng.choice(sorted(a for (a,) in q(conn, "SELECT artist FROM songs GROUP BY artist HAVING COUNT(*) >= 2")))
    for (song_id,) in q(conn, "SELECT song_id FROM songs WHERE artist = ? AND song_id NOT IN (SELECT song_id FROM "
                              "liked_songs WHERE email = ?) ORDER BY song_id LIMIT 2", artist, me):
        conn.execute("INSERT INTO liked_songs VALUES (?, ?, ?)", (me, song_id, stamp(rng)))
    wanted = {s for (s,) in q(conn, "SELECT l.song_id FROM liked_songs l JOIN songs s USING (song_id) WHERE "
                                    "l.email = ? AND s.artist = ?", me, artist)}
    title = f"{rng.choice(['Best of', 'All of', 'Just'])} {artist}"

    def created(c):
        return [r for r in new_rows(c, "playlists") if r[1] == c.me]

    def songs_of_new(c):
        return [s for (s,) in q(c.after, "SELECT song_id FROM playlist_songs WHERE playlist_id = ?", created(c)[0][0])]

    cell = (f'liked = all_pages(apis.music.show_liked_songs, access_token=tokens["music"])\n'
            f'playlist_id = apis.music.create_playlist(access_token=tokens["music"], title={title!r})["playlist_id"]\n'
            f'for song in liked:\n    if song["artist"] == {artist!r}:\n'
            f'        apis.music.add_song_to_playlist(access_token=tokens["music"], playlist_id=playlist_id, '
            f'song_id=song["song_id"])\napis.supervisor.complete_task()\n')
    checks = [("playlist_created", lambda c: len(created(c)) == 1 and created(c)[0][2].strip() == title),
              ("playlist_has_the_artists_liked_songs",
               lambda c: sorted(songs_of_new(c)) == sorted(wanted)),
              ("old_playlists_unchanged", lambda c: kept_rows(c, "playlists") and kept_rows(c, "playlist_songs")),
              ("no_other_changes", unchanged_except("playlists", "playlist_songs"))]
    return f"Create a playlist titled \"{title}\" in the music app with all the songs I have liked by {artist}.", \
        checks, cell


@scenario("messages_delete_mentions", 2, "train")
def _delete_mentions(conn, rng, me):
    my_phone = supervisor(conn)["phone_number"]
    contacts = q(conn, "SELECT first_name, last_name, phone_number FROM contacts WHERE owner_email = ? "
                       "ORDER BY contact_id", me)
    (first, last, phone), (_, _, other) = rng.sample(contacts, 2)
    word = rng.choice(["invoice", "parking", "passport"])
    add = lambda s, r, text: conn.execute("INSERT INTO messages (sender, receiver, content, sent_at) "  # noqa: E731
                                          "VALUES (?, ?, ?, ?)", (s, r, text, stamp(rng)))
    add(phone, my_phone, f"Here is the {word} you asked about")
    add(phone, my_phone, f"{word.capitalize()} question: can you check it tonight?")
    add(phone, my_phone, "See you soon")
    add(my_phone, phone, f"Thanks, got the {word}")           # sent, not received: keep
    add(other, my_phone, f"Did you sort out the {word}?")      # someone else: keep
    targets = {i for i, s, t in q(conn, "SELECT message_id, sender, content FROM messages")
               if s == phone and word in t.lower()}

    def remaining(c):
        return {r[0] for r in q(c.after, "SELECT message_id FROM messages")}

    cell = (f'contact = apis.messages.show_contacts(access_token=tokens["messages"], query={first + " " + last!r})[0]\n'
            f'found = all_pages(apis.messages.show_messages, access_token=tokens["messages"], '
            f'phone_number=contact["phone_number"], query={word!r})\n'
            f'for message in found:\n'
            f'    if message["sender"] == contact["phone_number"] and {word!r} in message["content"].lower():\n'
            f'        apis.messages.delete_message(access_token=tokens["messages"], message_id=message["message_id"])\n'
            f'apis.supervisor.complete_task()\n')
    checks = [("matching_messages_deleted", lambda c: not targets & remaining(c)),
              ("other_messages_kept", lambda c: rows(c.after, "messages") ==
               [r for r in rows(c.before, "messages") if r[0] not in targets]),
              ("no_other_changes", unchanged_except("messages"))]
    return f"Delete every text message I received from {first} {last} that mentions \"{word}\".", checks, cell


def _contacts_of(conn, me, rng):
    by_rel = Counter(r for (r,) in q(conn, "SELECT relationship FROM contacts WHERE owner_email = ?", me))
    rel = rng.choice(sorted(r for r, n in by_rel.items() if n >= 2))
    return rel, q(conn, "SELECT phone_number, email FROM contacts WHERE owner_email = ? AND relationship = ?", me, rel)


@scenario("wallet_pay_relationship", 3, "train")
def _pay_relationship(conn, rng, me):
    rel, targets = _contacts_of(conn, me, rng)
    emails = {e for _, e in targets}
    amount, desc = rng.choice([12.5, 15, 20, 25, 30]), rng.choice(["Pizza night", "Gas money", "Group gift"])
    conn.execute("UPDATE balances SET balance = MAX(balance, ?) WHERE email = ?", (amount * len(targets) + 100, me))

    def sent(c):
        return new_rows(c, "transactions")

    def balances_ok(c):
        before = dict(q(c.before, "SELECT email, balance FROM balances"))
        after = dict(q(c.after, "SELECT email, balance FROM balances"))
        delta = {e: (-amount * len(emails) if e == c.me else amount if e in emails else 0) for e in before}
        return before.keys() == after.keys() and all(close(after[e], before[e] + delta[e]) for e in before)

    cell = (f'for contact in all_pages(apis.messages.show_contacts, access_token=tokens["messages"], '
            f'relationship={rel!r}):\n'
            f'    apis.wallet.send_money(access_token=tokens["wallet"], receiver_email=contact["email"], '
            f'amount={amount!r}, description={desc!r})\napis.supervisor.complete_task()\n')
    checks = [("each_paid_once", lambda c: all(
                  sum(t[1] == c.me and t[2] == e and close(t[3], amount) and t[4] == desc for t in sent(c)) == 1
                  for e in emails)),
              ("no_one_else_paid", lambda c: len(sent(c)) == len(emails) and all(t[2] in emails for t in sent(c))),
              ("balances_correct", balances_ok),
              ("no_other_changes", unchanged_except("transactions", "balances"))]
    return (f"Send ${amount} through the wallet app to each of my contacts whose relationship to me is \"{rel}\", "
            f"with the description \"{desc}\".", checks, cell)


@scenario("notes_tag_count", 1, "dev")
def _tag_count(conn, rng, me):
    counts = Counter(t for (tags,) in q(conn, "SELECT tags FROM notes WHERE owner_email = ?", me)
                     for t in json.loads(tags))
    tag = rng.choice(sorted(t for t, n in counts.items() if n >= 2))
    cell = (f'tagged = all_pages(apis.notes.show_notes, access_token=tokens["notes"], tag={tag!r})\n'
            f'apis.supervisor.complete_task(answer=len(tagged))\n')
    return (f"How many of my notes are tagged \"{tag}\"?",
            [("answer_correct", answer_is(counts[tag])), ("no_changes", unchanged_except())], cell)


@scenario("wallet_settle_requests", 2, "dev")
def _settle_requests(conn, rng, me):
    limit = rng.choice([40, 50, 60, 75])
    others = [e for (e,) in q(conn, "SELECT email FROM users WHERE email != ? ORDER BY email", me)]
    add_request(conn, rng, rng.choice(others), me, float(limit - rng.randint(1, 20)))
    add_request(conn, rng, rng.choice(others), me, float(limit + rng.randint(5, 40)))
    add_request(conn, rng, rng.choice(others), me, float(limit))  # at the limit: "at most" includes it
    pending = q(conn, "SELECT request_id, requester_email, amount FROM payment_requests WHERE payer_email = ? AND "
                      "status = 'pending'", me)
    small = [r for r in pending if r[2] <= limit]
    conn.execute("UPDATE balances SET balance = MAX(balance, ?) WHERE email = ?", (sum(r[2] for r in small) + 100, me))

    def status(c, request_id):
        return q(c.after, "SELECT status FROM payment_requests WHERE request_id = ?", request_id)[0][0]

    def money_moved(c):
        got = sorted((t[1], t[2], round(t[3], 2)) for t in new_rows(c, "transactions"))
        before = dict(q(c.before, "SELECT email, balance FROM balances"))
        after = dict(q(c.after, "SELECT email, balance FROM balances"))
        for _, requester, amount in small:
            before[c.me] -= amount
            before[requester] += amount
        return got == sorted((c.me, r, round(a, 2)) for _, r, a in small) and \
            all(close(after[e], before[e]) for e in before)

    pending_ids = {r[0] for r in pending}
    cell = (f'for request in all_pages(apis.wallet.show_payment_requests, access_token=tokens["wallet"], '
            f'status="pending"):\n    if request["amount"] <= {limit}:\n'
            f'        apis.wallet.approve_payment_request(access_token=tokens["wallet"], '
            f'request_id=request["request_id"])\n    else:\n'
            f'        apis.wallet.deny_payment_request(access_token=tokens["wallet"], request_id=request["request_id"])\n'
            f'apis.supervisor.complete_task()\n')
    checks = [("small_requests_approved", lambda c: all(status(c, r[0]) == "approved" for r in small)),
              ("large_requests_denied", lambda c: all(status(c, r[0]) == "denied" for r in pending if r[2] > limit)),
              ("settled_requests_untouched", lambda c: len(rows(c.after, "payment_requests")) ==
               len(rows(c.before, "payment_requests")) and kept_rows(
                   c, "payment_requests", f"request_id NOT IN ({','.join(map(str, pending_ids))})")),
              ("money_moved", money_moved),
              ("no_other_changes", unchanged_except("payment_requests", "transactions", "balances"))]
    return (f"In the wallet app, approve every pending payment request of at most ${limit} and deny every other "
            f"pending request.", checks, cell)


@scenario("messages_text_relationship", 1, "test")
def _text_relationship(conn, rng, me):
    rel, targets = _contacts_of(conn, me, rng)
    phones = {p for p, _ in targets}
    text = rng.choice(["I'm hosting a barbecue on Saturday at 5pm, hope you can come!",
                       "Reminder: the book club meets on Thursday.", "I got a new phone, this is still my number."])
    cell = (f'for contact in all_pages(apis.messages.show_contacts, access_token=tokens["messages"], '
            f'relationship={rel!r}):\n'
            f'    apis.messages.send_message(access_token=tokens["messages"], phone_number=contact["phone_number"], '
            f'content={text!r})\napis.supervisor.complete_task()\n')
    checks = [("each_texted_once", lambda c: all(
                  sum(m[2] == p and m[3].strip() == text for m in new_rows(c, "messages")) == 1 for p in phones)),
              ("no_one_else_texted", lambda c: all(m[2] in phones and m[3].strip() == text
                                                   for m in new_rows(c, "messages"))),
              ("old_messages_kept", lambda c: kept_rows(c, "messages")),
              ("no_other_changes", unchanged_except("messages"))]
    return f"Send the text message \"{text}\" to each of my contacts whose relationship to me is \"{rel}\".", \
        checks, cell


@scenario("music_prune_playlist", 2, "test")
def _prune_playlist(conn, rng, me):
    pid, title = rng.choice(q(conn, "SELECT playlist_id, title FROM playlists WHERE owner_email = ? "
                                    "ORDER BY playlist_id", me))
    liked = {s for (s,) in q(conn, "SELECT song_id FROM liked_songs WHERE email = ?", me)}
    inside = [s for (s,) in q(conn, "SELECT song_id FROM playlist_songs WHERE playlist_id = ? ORDER BY position", pid)]
    extra = [rng.choice(sorted(liked - set(inside))), rng.choice(sorted(set(range(1, 41)) - liked - set(inside)))]
    for pos, song_id in enumerate(extra, start=len(inside)):
        conn.execute("INSERT INTO playlist_songs VALUES (?, ?, ?)", (pid, song_id, pos))
    keep = [s for s in inside + extra if s in liked]

    def songs(c):
        return [s for (s,) in q(c.after, "SELECT song_id FROM playlist_songs WHERE playlist_id = ? ORDER BY position",
                                pid)]

    cell = (f'playlist = next(p for p in all_pages(apis.music.show_playlists, access_token=tokens["music"]) '
            f'if p["title"] == {title!r})\n'
            f'liked_ids = {{s["song_id"] for s in all_pages(apis.music.show_liked_songs, access_token=tokens["music"])}}\n'
            f'for song in apis.music.show_playlist(access_token=tokens["music"], '
            f'playlist_id=playlist["playlist_id"])["songs"]:\n'
            f'    if song["song_id"] not in liked_ids:\n'
            f'        apis.music.remove_song_from_playlist(access_token=tokens["music"], '
            f'playlist_id=playlist["playlist_id"], song_id=song["song_id"])\napis.supervisor.complete_task()\n')
    checks = [("unliked_songs_removed", lambda c: songs(c) == keep),
              ("other_playlists_unchanged", lambda c: kept_rows(c, "playlists") and
               kept_rows(c, "playlist_songs", "playlist_id != ?", pid)),
              ("no_other_changes", unchanged_except("playlist_songs"))]
    return f"Remove every song I have not liked from my music playlist \"{title}\".", checks, cell


@scenario("wallet_received_total", 2, "test")
def _received_total(conn, rng, me):
    first, last, email = rng.choice(q(conn, "SELECT first_name, last_name, email FROM contacts WHERE owner_email = ? "
                                            "ORDER BY contact_id", me))
    for sender, receiver in ((email, me), (email, me), (me, email)):
        conn.execute("INSERT INTO transactions (sender_email, receiver_email, amount, description, created_at) VALUES "
                     "(?, ?, ?, 'Dinner', ?)", (sender, receiver, round(rng.uniform(5, 80), 2), stamp(rng)))
    total = round(sum(a for (a,) in q(conn, "SELECT amount FROM transactions WHERE sender_email = ? AND "
                                            "receiver_email = ?", email, me)), 2)
    cell = (f'contact = apis.messages.show_contacts(access_token=tokens["messages"], query={first + " " + last!r})[0]\n'
            f'received = all_pages(apis.wallet.show_transactions, access_token=tokens["wallet"], direction="received")\n'
            f'apis.supervisor.complete_task(answer=round(sum(t["amount"] for t in received '
            f'if t["sender_email"] == contact["email"]), 2))\n')
    return (f"How much money in total have I received through the wallet app from {first} {last}?",
            [("answer_correct", answer_is(total)), ("no_changes", unchanged_except())], cell)


@scenario("notes_playlist_note", 3, "test")
def _playlist_note(conn, rng, me):
    pid, playlist = rng.choice(q(conn, "SELECT playlist_id, title FROM playlists WHERE owner_email = ? "
                                       "ORDER BY playlist_id", me))
    titles = [t for (t,) in q(conn, "SELECT s.title FROM playlist_songs ps JOIN songs s USING (song_id) WHERE "
                                    "ps.playlist_id = ? ORDER BY ps.position", pid)]
    note_title = f"Songs of {playlist}"

    def created(c):
        return new_rows(c, "notes")

    cell = (f'playlist = next(p for p in all_pages(apis.music.show_playlists, access_token=tokens["music"]) '
            f'if p["title"] == {playlist!r})\n'
            f'songs = apis.music.show_playlist(access_token=tokens["music"], playlist_id=playlist["playlist_id"])'
            f'["songs"]\napis.notes.create_note(access_token=tokens["notes"], title={note_title!r}, '
            f'content="\\n".join(song["title"] for song in songs))\napis.supervisor.complete_task()\n')
    checks = [("note_created", lambda c: len(created(c)) == 1 and created(c)[0][1] == c.me and
               created(c)[0][2].strip() == note_title),
              ("note_lists_the_songs_in_order", lambda c: [ln.strip() for ln in created(c)[0][3].splitlines()
                                                           if ln.strip()] == titles),
              ("old_notes_unchanged", lambda c: kept_rows(c, "notes")),
              ("no_other_changes", unchanged_except("notes"))]
    return (f"Create a note titled \"{note_title}\" in the notes app whose content is the titles of the songs in my "
            f"music playlist \"{playlist}\", one per line, in the playlist's order.", checks, cell)
