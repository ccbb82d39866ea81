"""Where results leave stetho for people: the knowledge-base git repository and webhooks."""
