"""atpd, the Asynchronous Task Processing Daemon.

One supervisor process (``supervisor``) claims tasks and hands them to long-lived
worker processes it forks and watches (``pool``); a worker runs one task at a time
(``worker``, ``execution``) and gives the handler its ``task`` (``context``). The
supervisor heartbeats and holds a lease on its tasks (``lease``), wakes on
PostgreSQL notifications (``wakeup``), rides out database outages (``outage``) and
restarts the tasks of dead daemons and purges old ones (``maintenance``).

Only the ``atpd`` management command and tests import this package.
"""

from atp.daemon.config import DaemonConfig
from atp.daemon.supervisor import Supervisor

__all__ = ["DaemonConfig", "Supervisor"]
