"""AppWorld: the real package behind its HTTP server (client.py) and an offline stand-in (lite/); env.py is the env."""
import envs.appworld.env  # noqa: F401  (registers "appworld")
