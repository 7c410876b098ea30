"""Watcher Lambda: releases a message the moment its execution fails, times out or is aborted."""
