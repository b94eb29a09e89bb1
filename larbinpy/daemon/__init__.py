"""The long-lived process's faces: the HTTP ports (status page, metrics, input), the status
snapshot they read, the progress line, and the `submit` client."""
