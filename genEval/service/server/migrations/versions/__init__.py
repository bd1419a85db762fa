"""The revisions of the service database schema, oldest first (:mod:`genEval.service.server.migrations`)."""
