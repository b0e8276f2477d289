"""Operating aioqueue: the command line (``cli``), the worker command (``serve``), the
one-shot commands (``commands``) and log formats (``logs``). Nothing below imports this."""
