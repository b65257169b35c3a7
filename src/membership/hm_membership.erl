%% @doc Membership, one server per node: brings a partitioned cluster back together without an
%% operator.
%%
%% Members are Mnesia's `db_nodes'. Every second it pings each member it is not connected to,
%% with exponential back-off per node (1 s doubling to 16 s, reset when the node comes back);
%% and for each connected member that Mnesia does not count as running (after a netsplit Mnesia
%% reports `inconsistent_database' and stays split) it asks Mnesia to connect again with
%% `mnesia_controller:connect_nodes/2', merging only the schema. EC tables then converge by
%% themselves ({@link hm_ec_server} resends what each member lacks on `nodeup'); replicated
%% non-EC tables keep whatever each side wrote, as Mnesia always did (see
%% docs/guide/04-partitions.md).
%%
%% It reports a member going down (`partition'), coming back (`reconnect') and Mnesia
%% re-joined (`mnesia_rejoin') as {@link hm_events} events, and counts them in
%% {@link status/0}.
%%
%% Application environment: `reconnect' (default `true'; `false' leaves reconnection to the
%% operator), `max_backoff_ms' (default 16000).
-module(hm_membership).
-behaviour(gen_server).

-export([start_link/0, status/0, mnesia_list/1]).
-export([init/1, handle_call/3, handle_cast/2, handle_info/2]).

-define(TICK_MS, 1000).
-define(MAX_BACKOFF_MS, 16000).

-spec start_link() -> {ok, pid()} | {error, term()}.
start_link() -> gen_server:start_link({local, ?MODULE}, ?MODULE, [], []).

%% @doc Members, who is connected, who Mnesia runs with, and the reconnection back-off.
-spec status() -> map().
status() -> gen_server:call(?MODULE, status).

-spec init([]) -> {ok, map()}.
init([]) ->
    ok = net_kernel:monitor_nodes(true),
    erlang:send_after(?TICK_MS, self(), tick),
    {ok, #{backoff => #{}, rejoined => 0, down => #{}, partitions => 0,
           last_partition => undefined}}.

-spec handle_call(term(), gen_server:from(), map()) -> {reply, term(), map()}.
handle_call(status, _From, S = #{backoff := B, rejoined := J, partitions := P,
                                last_partition := LP}) ->
    {reply, #{members => db_nodes(), connected => [node() | nodes()],
              running => running_db_nodes(), backoff_ms => maps:map(fun(_, {_, Ms}) -> Ms end, B),
              mnesia_rejoins => J, partitions_seen => P, last_partition => LP}, S};
handle_call(_, _From, S) -> {reply, {error, unknown_request}, S}.

-spec handle_cast(term(), map()) -> {noreply, map()}.
handle_cast(_, S) -> {noreply, S}.

-spec handle_info(term(), map()) -> {noreply, map()}.
handle_info(tick, S) ->
    erlang:send_after(?TICK_MS, self(), tick),
    case application:get_env(hypermnesia, reconnect, true) of
        true -> {noreply, rejoin(reconnect(S))};
        false -> {noreply, S}
    end;
handle_info({nodeup, N}, S = #{backoff := B, down := D}) ->
    _ = [hm_events:notify(reconnect, #{peer => N, down_ms => down_ms(maps:get(N, D, undefined))})
         || lists:member(N, db_nodes())],
    {noreply, S#{backoff := maps:remove(N, B), down := maps:remove(N, D)}};
handle_info({nodedown, N}, S = #{down := D, partitions := P}) ->
    case lists:member(N, db_nodes()) of
        true ->
            ok = hm_events:notify(partition, #{peer => N}),
            {noreply, S#{down := D#{N => erlang:monotonic_time(millisecond)},
                         partitions := P + 1,
                         last_partition => #{peer => N, time => erlang:system_time(millisecond)}}};
        false -> {noreply, S}
    end;
handle_info(_, S) ->
    {noreply, S}.

%% Ping members we are not connected to, each on its own back-off.
reconnect(S = #{backoff := B}) ->
    Now = erlang:monotonic_time(millisecond),
    Down = [N || N <- db_nodes(), N =/= node(), not lists:member(N, nodes())],
    B1 = lists:foldl(
           fun(N, Acc) ->
                   case maps:get(N, Acc, {Now, ?TICK_MS}) of
                       {Next, Ms} when Next =< Now ->
                           case net_adm:ping(N) of
                               pong -> maps:remove(N, Acc);
                               pang -> Acc#{N => {Now + Ms, min(2 * Ms, max_backoff())}}
                           end;
                       _ -> Acc
                   end
           end, maps:with(Down, B), Down),
    S#{backoff := B1}.

%% Connected members Mnesia does not run with: connect Mnesia again, schema only.
rejoin(S = #{rejoined := J}) ->
    Split = [N || N <- db_nodes(), lists:member(N, nodes()),
                  not lists:member(N, running_db_nodes())],
    case Split =/= [] andalso mnesia_running() of
        true ->
            case try_connect(Split) of
                {ok, _} ->
                    %% the EC server, subscribed to it, takes up the tables again at once
                    ok = hm_events:notify(mnesia_rejoin, #{peers => Split}),
                    S#{rejoined := J + 1};
                Other -> logger:notice("hypermnesia: mnesia rejoin of ~0p: ~0p", [Split, Other]), S
            end;
        false -> S
    end.

down_ms(undefined) -> undefined;
down_ms(Since) -> erlang:monotonic_time(millisecond) - Since.

max_backoff() -> application:get_env(hypermnesia, max_backoff_ms, ?MAX_BACKOFF_MS).

mnesia_running() -> mnesia:system_info(is_running) =:= yes.

db_nodes() -> mnesia_list(db_nodes).

running_db_nodes() -> mnesia_list(running_db_nodes).

%% @doc One of Mnesia's lists (`mnesia:system_info(Which)': `db_nodes', `running_db_nodes',
%% `local_tables', ...), or `[]' when Mnesia cannot answer (not running, or stopping).
-spec mnesia_list(atom()) -> list().
mnesia_list(Which) ->
    try mnesia:system_info(Which) of
        L when is_list(L) -> L;
        _ -> []
    catch _:_ -> []
    end.

%% Ask Mnesia to connect to `Split' and merge schemas (nothing to merge); its answer, or the
%% exception it raised, for the log.
try_connect(Split) ->
    try mnesia_controller:connect_nodes(Split, fun(Merge) -> Merge([]) end)
    catch C:R -> {C, R}
    end.
