"""KServe InferenceGraph's router: one process per graph replica running its nodes over HTTP (see `server`)."""
