"""The fleet: stetho on every node through Ansible (the sweep), and what it brings back."""
