%% @doc Top supervisor: the EC delivery server (one per node) and the membership server.
-module(hypermnesia_sup).
-behaviour(supervisor).
-export([start_link/0, init/1]).

-spec start_link() -> {ok, pid()} | {error, term()}.
start_link() -> supervisor:start_link({local, ?MODULE}, ?MODULE, []).

-spec init([]) -> {ok, {supervisor:sup_flags(), [supervisor:child_spec()]}}.
init([]) ->
    Child = fun(M) -> #{id => M, start => {M, start_link, []}} end,
    {ok, {#{strategy => one_for_one, intensity => 10, period => 10},
          [Child(hm_ec_server), Child(hm_membership)]}}.
