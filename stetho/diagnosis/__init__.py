"""Diagnosis: from a failing node's signals to ranked root causes, a report, and alerts."""
