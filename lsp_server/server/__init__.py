"""The language server: the pygls server and its handlers (`server`), from requests to
suggestions (`suggester`), the engine's home (`engine_host`), the open documents, the settings
and the acceptance telemetry."""
