"""RPC and security options: addresses, message limits, CurveZMQ and ZooKeeper credentials (Flink's
``RpcOptions``, ``SecurityOptions``).
"""

from __future__ import annotations

from sparkmill.common.config.kinds import (
    ADDRESS,
    BOOL,
    DURATION,
    INT,
    MEMORY,
    STRING,
)
from sparkmill.common.config.options._declare import MIB, MS, group, option

# --------------------------------------------------------------------------------------------
group(
    "RPC and addresses",
    "How the services find and talk to each other over ZeroMQ. Each role's rpc-address is the "
    "address it *advertises* (what others dial: in ZooKeeper, registrations, deployments); "
    "rpc.bind-host is where it listens (Flink's rpc.address vs rpc.bind-address).",
)
RPC_BIND_HOST = option(
    "rpc.bind-host",
    STRING,
    "",
    "Host or interface the RPC server of this process binds to: '0.0.0.0' (or '::') for all "
    "interfaces, or one interface's address; the port is the role's rpc-address's.",
    default_text="the host of this role's rpc-address",
)
RPC_ASK_TIMEOUT = option(
    "rpc.ask-timeout",
    DURATION,
    10.0,
    "Default deadline of an RPC call that does not carry its own timeout.",
    min=MS,
)
RPC_MAX_MESSAGE_SIZE = option(
    "rpc.max-message-size",
    MEMORY,
    64 * MIB,
    "Largest RPC message a server accepts or a client sends; larger ones are refused.",
    min=1024,
)
RPC_MAX_CONTROL_MESSAGE_SIZE = option(
    "rpc.max-control-message-size",
    MEMORY,
    4 * MIB,
    "Largest request of a method that carries no job graph or task code (every method but "
    "SubmitJob, StartJob and SubmitTask); larger ones are refused with INVALID_ARGUMENT.",
    min=1024,
)
RPC_MAX_IN_FLIGHT_PER_PEER = option(
    "rpc.max-in-flight-per-peer",
    INT,
    1000,
    "Requests one peer (one authenticated key, or one connection without security) may have "
    "in progress at a server; more are refused with RESOURCE_EXHAUSTED.",
    min=1,
)
DISPATCHER_RPC_ADDRESS = option(
    "dispatcher.rpc-address",
    ADDRESS,
    "tcp://127.0.0.1:6123",
    "The dispatcher's advertised address; clients submit jobs here when high availability is "
    "off. It binds its port on rpc.bind-host. Never a wildcard (0.0.0.0, *): start-up refuses it.",
)
RESOURCE_MANAGER_RPC_ADDRESS = option(
    "resourcemanager.rpc-address",
    ADDRESS,
    "tcp://127.0.0.1:6124",
    "The resource manager's advertised address; task executors and job masters register here "
    "when high availability is off. It binds its port on rpc.bind-host.",
)
JOB_MASTER_RPC_ADDRESS = option(
    "jobmaster.rpc-address",
    ADDRESS,
    "tcp://127.0.0.1:0",
    "Advertised address of a job master (this host's name or address as others reach it); it "
    "binds the port on rpc.bind-host, port 0 picking a free one, which is then advertised.",
)
TASK_MANAGER_RPC_ADDRESS = option(
    "taskmanager.rpc-address",
    ADDRESS,
    "tcp://127.0.0.1:0",
    "Advertised address of a task executor (this host's name or address as others reach it); "
    "it binds the port on rpc.bind-host, port 0 picking a free one, which is then advertised.",
)

# --------------------------------------------------------------------------------------------
group(
    "Security",
    "CurveZMQ encryption and authentication of every RPC, authorization by role, and ZooKeeper "
    "digest authentication; see docs/security.md.",
)
SECURITY_CURVE_ENABLED = option(
    "security.curve.enabled",
    BOOL,
    True,
    "Encrypt and authenticate every RPC with CurveZMQ and admit only the cluster's keys. "
    "'false' is for an isolated lab only: anyone reaching a port can then run code on the "
    "task executors (every process logs a warning).",
)
SECURITY_CURVE_PUBLIC_KEYS_DIR = option(
    "security.curve.public-keys-dir",
    STRING,
    "",
    "Directory of the admitted public keys: server.key and one <role>[-<name>].key per member "
    "(role: client, dispatcher, resource-manager, job-master, task-executor).",
)
SECURITY_CURVE_SECRET_KEY_FILE = option(
    "security.curve.secret-key-file",
    STRING,
    "",
    "This process's secret key file (mode 0600); '{role}' is replaced by the process's role "
    "(client for the CLI), so one configuration can serve every process of a host.",
)
SECURITY_CURVE_SERVER_SECRET_KEY_FILE = option(
    "security.curve.server-secret-key-file",
    STRING,
    "",
    "The cluster's server secret key file (mode 0600), which every service process serves "
    "with; clients need only its public half (server.key).",
)
SECURITY_ZOOKEEPER_DIGEST_FILE = option(
    "security.zookeeper.digest-file",
    STRING,
    "",
    "This service's ZooKeeper digest file (mode 0600, 'user:password'); '{role}' is replaced "
    "by the process's role (e.g. .../private/zookeeper-{role}.digest). Clients need none. "
    "Without security.zookeeper.identities-file, one digest shared by every process (the "
    "former layout: accepted with a warning).",
)
SECURITY_ZOOKEEPER_IDENTITIES_FILE = option(
    "security.zookeeper.identities-file",
    STRING,
    "",
    "Public file of every service role's ZooKeeper digest id ('role user:hash' lines, "
    "written by 'sparkmill keys generate'); when set, each role authenticates as itself and "
    "every znode's ACL grants each role only what it does there (docs/security.md).",
)
