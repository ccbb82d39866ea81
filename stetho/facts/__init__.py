"""Stage 3: a bundle's raw evidence turned into typed facts (parsed lazily, once), the metrics
measured from them, and the Xid catalog that gives kernel-log events their meaning."""
