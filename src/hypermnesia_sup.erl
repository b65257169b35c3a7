%% @doc Top supervisor: the replication of Mnesia's dirty writes to EC tables ({@link
%% hm_ec_dirty}: first, so that the table processes it knows are restarted with it), the EC
%% table processes' supervisor, the node's EC server (which
%% finds the EC tables and starts their processes), the membership server, the events
%% server ({@link hm_events}: subscriptions), the HTTP status page ({@link hm_http}: only
%% when the application environment asks for it), then the supervisor of the session
%% repositories' servers.
-module(hypermnesia_sup).
-behaviour(supervisor).
-export([start_link/0, init/1]).

-spec start_link() -> {ok, pid()} | {error, term()}.
start_link() -> supervisor:start_link({local, ?MODULE}, ?MODULE, []).

-spec init([]) -> {ok, {supervisor:sup_flags(), [supervisor:child_spec()]}}.
init([]) ->
    Child = fun(M, Type) -> #{id => M, start => {M, start_link, []}, type => Type} end,
    {ok, {#{strategy => rest_for_one, intensity => 10, period => 10},
          [Child(hm_ec_dirty, worker), Child(hm_ec_table_sup, supervisor),
           Child(hm_ec_server, worker),
           Child(hm_membership, worker), Child(hm_events, worker), Child(hm_http, worker),
           Child(hm_mrdt_sup, supervisor)]}}.
