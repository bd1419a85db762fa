"""What the studies share: the roofline counting and device peaks (:mod:`.roofline`), role stand-ins (:mod:`.roles`),
timing (:mod:`.timing`), the local Ray cluster (:mod:`.ray_cluster`), what "the same run" means
(:mod:`.run_equality`), the results files and their recording (:mod:`.results`); and what the service studies share
with the tests (which import them through ``tests/support``): tiny known components (:mod:`.toys`), the settled
benchmark's centroid classifiers (:mod:`.centroids`), the pages in headless Chromium (:mod:`.pages`), issue 41's
hostile files (:mod:`.hostile`), a PostgreSQL cluster (:mod:`.postgres`), ports and slow clients (:mod:`.net`), the
shipped presets without the command layer (:mod:`.presets`), and another checkout's library in a child process
(:mod:`.checkout`). Imported as ``benchmarks.harness.<module>`` (run a study as ``python -m benchmarks.<study>``
from the checkout)."""
