"""Prefect flows: a thin layer that fans stage units out as tasks and chains stages. No stage logic here.

Importing this package sets Prefect's offline defaults before Prefect itself is imported: no analytics, no
phoning home, and a start-up timeout for the temporary local server that survives a loaded 2-core machine.
Users can still override each of them in their environment.
"""

import os

for _key, _value in {
    "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
    "DO_NOT_TRACK": "1",
    "PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS": "90",
}.items():
    os.environ.setdefault(_key, _value)
