%% @doc Supervisor of the EC table processes of this node ({@link hm_ec_table_server}), one
%% per EC table with a local copy. {@link hm_ec_server} starts and stops them as tables come
%% and go; they are `temporary': a table process that ended is started again by the server's
%% next refresh (a `ram_copies' copy as a new incarnation that catches up by state transfer,
%% a `disc_copies' copy from its disc state). A table whose EC options name another
%% `server' module (a partitioned table's fragment under another replication) gets that
%% module's process instead, started as `Module:start_link(Tab, EcOpts)'.
-module(hm_ec_table_sup).
-behaviour(supervisor).

-export([start_link/0, start_table/2, stop_table/1, init/1, start_copy/2]).

-spec start_link() -> {ok, pid()} | {error, term()}.
start_link() -> supervisor:start_link({local, ?MODULE}, ?MODULE, []).

%% @doc Start the process of table `Tab'.
-spec start_table(atom(), map()) -> {ok, pid()} | {error, term()}.
start_table(Tab, EcOpts) ->
    case supervisor:start_child(?MODULE, [Tab, EcOpts]) of
        {ok, Pid} -> {ok, Pid};
        {ok, Pid, _} -> {ok, Pid};
        {error, _} = E -> E
    end.

%% @doc Start the process of one table copy: the module its EC options name as `server',
%% {@link hm_ec_table_server} by default.
-spec start_copy(atom(), map()) -> {ok, pid()} | {error, term()}.
start_copy(Tab, EcOpts) ->
    Module = maps:get(server, EcOpts, hm_ec_table_server),
    Module:start_link(Tab, EcOpts).

%% @doc Stop a table's process.
-spec stop_table(pid()) -> ok.
stop_table(Pid) ->
    _ = supervisor:terminate_child(?MODULE, Pid),
    ok.

-spec init([]) -> {ok, {supervisor:sup_flags(), [supervisor:child_spec()]}}.
init([]) ->
    {ok, {#{strategy => simple_one_for_one, intensity => 100, period => 10},
          [#{id => hm_ec_table_server, start => {?MODULE, start_copy, []},
             restart => temporary, shutdown => 5000}]}}.
