%% @doc The EC delivery process of a node (the Hypermnesia paper, §4.3: a gen_server in front
%% of the tagged causal stable broadcast). A thin shell around the per-table core
%% {@link hm_ec_table}: it finds the EC tables this node holds a copy of, holds each one's
%% core state on a Mnesia store ({@link hm_ec_store_mnesia}), feeds it calls, members'
%% messages, ticks and node events, and carries out the effects the core returns (sends,
%% replies, timers, disc syncs, log lines). Every operation, local or remote, is applied in
%% this one process, one at a time, in causal order: a key's read-modify-write is atomic.
%%
%% Every `tick' (250 ms) each table acknowledges, retransmits what members reported they
%% lack, and folds what became stable (see {@link hm_ec_table:tick/2}); every 4th tick the
%% server re-reads which tables are EC tables and who holds copies. Other members'
%% operations wait in a queue of this process and are applied a few at a time behind what
%% else arrives (local calls, acks, ticks), so a heal's backlog never stalls local writers.
%%
%% When Mnesia stops on this node while Hypermnesia runs (a crash of Mnesia alone,
%% `mnesia:stop/0'), every table's state is dropped with it: a `ram_copies' copy comes back
%% empty, so it is taken up again as a new incarnation that catches up by state transfer;
%% a `disc_copies' copy resumes from its disc state. Messages from unknown nodes, for
%% another instance of a table, or of unknown shape are logged (at most once every 10 s per
%% kind) and dropped.
-module(hm_ec_server).
-behaviour(gen_server).

-export([start_link/0, submit/3, info/0, info/1, refresh/0, refresh_async/0, tick_ms/0]).
-export([init/1, handle_call/3, handle_cast/2, handle_info/2]).

-define(TICK_MS, 250).

-type mode() :: async | sync.

%%% ---------------------------------------------------------------- API

-spec start_link() -> {ok, pid()} | {error, term()}.
start_link() -> gen_server:start_link({local, ?MODULE}, ?MODULE, [], []).

%% @doc Apply an operation on `Key' of EC table `Tab' here and broadcast it. `async' returns
%% once applied locally; `sync' once every reachable copy holder has applied it (and, for a
%% disc table, once the local write is on disc).
-spec submit(atom(), {term(), hm_ec_table:op()}, mode()) -> ok | {error, term()}.
submit(Tab, KeyOp, Mode) ->
    gen_server:call(?MODULE, {submit, Tab, KeyOp, Mode}, infinity).

%% @doc {@link refresh/0} without waiting (for callers that must not block on a busy server).
-spec refresh_async() -> ok.
refresh_async() -> gen_server:cast(?MODULE, refresh).

%% @doc Node-wide status: EC tables and, per table, what {@link info/1} gives.
-spec info() -> map().
info() -> gen_server:call(?MODULE, info).

%% @doc Status of one EC table on this node.
-spec info(atom()) -> map() | {error, term()}.
info(Tab) -> gen_server:call(?MODULE, {info, Tab}).

%% @doc Look for new EC tables and copy holders now (otherwise every few ticks).
-spec refresh() -> ok.
refresh() -> gen_server:call(?MODULE, refresh).

-spec tick_ms() -> pos_integer().
tick_ms() -> ?TICK_MS.

%%% ---------------------------------------------------------------- gen_server

-spec init([]) -> {ok, map()}.
init([]) ->
    ok = net_kernel:monitor_nodes(true),
    Ref = make_ref(),
    erlang:send_after(?TICK_MS, self(), {tick, Ref}),
    {ok, refresh_tables(#{tables => #{}, ticks => 0, tick_ref => Ref, mnesia => undefined,
                          inq => queue:new(), work_posted => false})}.

-spec handle_call(term(), gen_server:from(), map()) ->
          {reply, term(), map()} | {noreply, map()}.
handle_call({submit, Tab, KeyOp, Mode}, From, S) ->
    case table(Tab, S) of
        {ok, T, S1} ->
            Now = erlang:system_time(microsecond),
            try hm_ec_table:submit(KeyOp, Mode, From, {Now, nodes()}, T) of
                {T1, Effs} -> {noreply, run(Tab, Effs, put_table(Tab, T1, S1))}
            catch Class:Reason:Stack ->
                    {reply, {error, {not_applied, Reason}}, failed(Tab, S1, Class, Reason, Stack)}
            end;
        error -> {reply, {error, {not_ec_table, Tab}}, S}
    end;
handle_call(info, _From, S = #{tables := Ts, inq := Q}) ->
    {reply, #{node => node(), queued_ops => queue:len(Q),
              tables => maps:map(fun(_Tab, T) -> hm_ec_table:info(nodes(), T) end, Ts)},
     S};
handle_call({info, Tab}, _From, S0) ->
    S = case hypermnesia:is_ec_table(Tab) of
            true -> S0;
            false -> refresh_tables(S0)            % deleted meanwhile: forget it now
        end,
    case table(Tab, S) of
        {ok, T, S1} -> {reply, hm_ec_table:info(nodes(), T), S1};
        error -> {reply, {error, {not_ec_table, Tab}}, S}
    end;
handle_call(refresh, _From, S) ->
    {reply, ok, refresh_tables(S)};
handle_call(Req, _From, S) ->
    {reply, {error, {unknown_request, Req}}, S}.

-spec handle_cast(term(), map()) -> {noreply, map()}.
handle_cast(refresh, S) ->
    {noreply, refresh_tables(S)};
handle_cast(Msg, S) ->
    logger:warning("hypermnesia: dropped unknown cast ~0p", [Msg]),
    {noreply, S}.

-spec handle_info(term(), map()) -> {noreply, map()}.
handle_info({hm_ec, Tab, FromNode, Msg = {op, _}, Cookie}, S = #{inq := Q})
  when is_atom(FromNode) ->
    %% other members' operations wait in this server's own queue, applied a few at a time
    %% behind whatever else arrives meanwhile (work/1)
    {noreply, post_work(S#{inq := queue:in({Tab, Cookie, FromNode, Msg}, Q)})};
handle_info({hm_ec, Tab, FromNode, {ops, Msgs}, Cookie}, S = #{inq := Q})
  when is_atom(FromNode), is_list(Msgs) ->
    %% a retransmission round: its operations, in causal order
    Q1 = lists:foldl(fun(M, Acc) -> queue:in({Tab, Cookie, FromNode, {op, M}}, Acc) end, Q, Msgs),
    {noreply, post_work(S#{inq := Q1})};
handle_info({hm_ec, Tab, FromNode, Msg, Cookie}, S) when is_atom(FromNode) ->
    {noreply, member_msg(Tab, Cookie, FromNode, Msg, S)};
handle_info(hm_work, S) ->
    {noreply, work(S#{work_posted := false})};
handle_info({tick, Ref}, S = #{tick_ref := Ref}) ->
    %% only this server's own timer ticks (a stray `tick' must not start another chain)
    erlang:send_after(?TICK_MS, self(), {tick, Ref}),
    {noreply, tick(S)};
handle_info({hm_timer, Tab, Msg}, S) ->
    {noreply, with_table(Tab, fun(T) -> hm_ec_table:timeout(Msg, T) end, S)};
handle_info({nodeup, N}, S) ->
    {noreply, each_table(fun(T) -> hm_ec_table:nodeup(N, T) end, S)};
handle_info({nodedown, N}, S) ->
    {noreply, each_table(fun(T) -> hm_ec_table:nodedown(N, T) end, S)};
handle_info({'DOWN', _, process, Pid, _}, S = #{mnesia := {Pid, _}}) ->
    {noreply, mnesia_gone(S)};
handle_info(Msg, S) ->
    {noreply, drop({unknown_message, Msg}, S)}.

%% A member's message for a table this node tracks (the core checks the table instance,
%% that the sender is a member, and the message's shape).
member_msg(Tab, Cookie, FromNode, Msg, S = #{tables := Ts}) ->
    case Ts of
        #{Tab := _} -> with_table(Tab, fun(T) -> hm_ec_table:handle(FromNode, Cookie, Msg, T) end, S);
        _ -> drop({unknown_table, Tab, FromNode}, S)
    end.

%% Fairness between this node's writers and other members' operations. After a partition
%% heals a member receives the other side's operations all at once; applied as they arrive,
%% they stood in the mailbox in front of every local write (async_ec stalled for seconds,
%% bench/REPORT.md). Queued instead, at most ?WORK_BATCH of them are applied per `hm_work'
%% message, which goes to the back of the mailbox: local calls, acks and ticks that came
%% meanwhile go first.
-define(WORK_BATCH, 8).

post_work(S = #{work_posted := true}) -> S;
post_work(S) -> self() ! hm_work, S#{work_posted := true}.

work(S) -> work(?WORK_BATCH, S).

work(0, S = #{inq := Q}) ->
    case queue:is_empty(Q) of
        true -> S;
        false -> post_work(S)
    end;
work(N, S = #{inq := Q}) ->
    case queue:out(Q) of
        {empty, _} -> S;
        {{value, {Tab, Cookie, From, Msg}}, Q1} ->
            work(N - 1, member_msg(Tab, Cookie, From, Msg, S#{inq := Q1}))
    end.

%%% ---------------------------------------------------------------- running the core

%% Run one step of a table's core and carry out its effects. One table's trouble never takes
%% the node's other tables down: a table that no longer exists here (deleted, copy removed,
%% Mnesia stopped) is forgotten; anything else is logged and the table keeps its state.
with_table(Tab, Step, S = #{tables := Ts}) ->
    case Ts of
        #{Tab := T} ->
            try Step(T) of
                {T1, Effs} -> run(Tab, Effs, put_table(Tab, T1, S))
            catch Class:Reason:Stack -> failed(Tab, S, Class, Reason, Stack)
            end;
        _ -> S
    end.

each_table(Step, S = #{tables := Ts}) ->
    maps:fold(fun(Tab, _, Acc) -> with_table(Tab, Step, Acc) end, S, Ts).

failed(Tab, S = #{tables := Ts}, _Class, {aborted, {no_exists, _}}, _Stack) ->
    logger:notice("hypermnesia: ~p is gone from this node", [Tab]),
    _ = [forget(T) || #{Tab := T} <- [Ts]],
    S#{tables := maps:remove(Tab, Ts)};
failed(Tab, S, Class, Reason, Stack) ->
    logger:error("hypermnesia: ~p: ~p:~0p at ~0p", [Tab, Class, Reason, Stack]),
    S.

%% The core's effects, in order.
run(Tab, Effs, S) -> lists:foldl(fun(E, Acc) -> effect(Tab, E, Acc) end, S, Effs).

effect(Tab, {send, Node, Msg}, S = #{tables := Ts}) ->
    #{Tab := T} = Ts,
    send(Node, Tab, hm_ec_table:cookie(T), Msg),
    S;
effect(_Tab, {reply, From, Reply}, S) -> gen_server:reply(From, Reply), S;
effect(Tab, {timer, Ms, Msg}, S) -> erlang:send_after(Ms, self(), {hm_timer, Tab, Msg}), S;
effect(_Tab, sync_log, S) -> _ = mnesia:sync_log(), S;
effect(_Tab, {drop, What}, S) -> drop(What, S);
effect(_Tab, {info, Format, Args}, S) -> logger:info(Format, Args), S;
effect(_Tab, {event, _}, S) -> S.

send(Node, Tab, Cookie, Msg) ->
    _ = erlang:send({?MODULE, Node}, {hm_ec, Tab, node(), Msg, Cookie}, [noconnect, nosuspend]),
    ok.

%% Log a dropped message, at most once every 10 s per kind (a flood of them must not make
%% the logger the bottleneck), with how many were dropped since.
drop(What, S) ->
    Kind = drop_kind(What),
    Now = erlang:monotonic_time(millisecond),
    Drops = maps:get(drops, S, #{}),
    case maps:get(Kind, Drops, {0, 0}) of
        {Since, N} when Now - Since < 10000 ->
            S#{drops => Drops#{Kind => {Since, N + 1}}};
        {_, N} ->
            logger:warning("hypermnesia: dropped ~0p (and ~p more like it before)", [What, N]),
            S#{drops => Drops#{Kind => {Now, 0}}}
    end.

drop_kind({Reason, A, B}) -> {Reason, A, is_atom(B)};
drop_kind({Reason, A, _, _}) -> {Reason, A};
drop_kind({Reason, _}) -> Reason.

%%% ---------------------------------------------------------------- ticks and tables

tick(S = #{ticks := N}) ->
    S1 = case N rem 4 of
             0 -> refresh_tables(S);
             _ -> S
         end,
    Up = nodes(),
    S2 = each_table(fun(T) -> hm_ec_table:tick(Up, T) end, S1),
    S2#{ticks := N + 1}.

table(Tab, S = #{tables := Ts}) ->
    case Ts of
        #{Tab := T} -> {ok, T, S};
        _ ->
            S1 = refresh_tables(S),
            case maps:get(tables, S1) of
                #{Tab := T} -> {ok, T, S1};
                _ -> error
            end
    end.

put_table(Tab, T, S = #{tables := Ts}) -> S#{tables := Ts#{Tab => T}}.

%% Mnesia stopped on this node: every table copy goes with it (a ram copy's contents are
%% gone; a disc copy is read back from disc when Mnesia is back).
mnesia_gone(S = #{tables := Ts}) ->
    _ = [forget(T) || T <- maps:values(Ts)],
    [logger:notice("hypermnesia: Mnesia stopped here; ~p is taken up again when it is back",
                   [Tab]) || Tab <- maps:keys(Ts)],
    S#{tables := #{}, mnesia := undefined}.

%% The running Mnesia, watched: a new one (Mnesia restarted between two refreshes) means
%% every table state held for the old one is stale.
watch_mnesia(S = #{mnesia := M}) ->
    case {whereis(mnesia_sup), M} of
        {undefined, undefined} -> S;
        {undefined, _} -> mnesia_gone(S);
        {Pid, {Pid, _}} -> S;
        {Pid, undefined} -> S#{mnesia := {Pid, erlang:monitor(process, Pid)}};
        {Pid, {_Old, Ref}} ->
            erlang:demonitor(Ref, [flush]),
            (mnesia_gone(S))#{mnesia := {Pid, erlang:monitor(process, Pid)}}
    end.

%% EC tables with a local copy, and their copy holders, from Mnesia's schema.
refresh_tables(S0) ->
    S = #{tables := Ts} = watch_mnesia(S0),
    Local = case catch mnesia:system_info(local_tables) of
                L when is_list(L) -> L;
                _ -> []
            end,
    %% A table already known keeps its state (its log, its incarnation) whatever Mnesia is
    %% doing, re-join included, until Mnesia says it is gone from this node, or that it is
    %% another instance (deleted and created again under the same name since: its state
    %% would be the old table's); a new one is taken up once Mnesia has loaded it.
    {Kept, Dropped} = maps:fold(fun(Tab, T, {K, D}) ->
                                        case gone(Tab, Local) orelse replaced(Tab, T) of
                                            false -> {K#{Tab => T}, D};
                                            true -> {K, [T | D]}
                                        end
                                end, {#{}, []}, Ts),
    _ = [forget(T) || T <- Dropped],
    Ec = [{Tab, Opts} || Tab <- Local, not maps:is_key(Tab, Kept),
                         {ok, Opts} <- [hypermnesia:ec_options(Tab)]],
    Ts1 = maps:map(fun(Tab, T) ->
                           case catch copy_holders(Tab) of
                               Ms when is_list(Ms) -> hm_ec_table:set_members(Ms, T);
                               _ -> T
                           end
                   end, Kept),
    lists:foldl(
      fun({Tab, Opts = #{meta := M, log := L}}, Acc) ->
              case mnesia:wait_for_tables([Tab, M, L], 0) of
                  ok -> take_up(Tab, Opts, Acc);
                  _ -> Acc
              end
      end, S#{tables := Ts1}, Ec).

replaced(Tab, T) ->
    Cookie = hm_ec_table:cookie(T),
    case catch mnesia:table_info(Tab, cookie) of
        Cookie -> false;
        {{_, _, _}, _} -> true;                    % another instance's cookie
        _ -> false                                 % not readable now: keep the state
    end.

forget(T) -> hm_ec_store_mnesia:forget(hm_ec_table:store(T)).

%% Gone for sure: Mnesia runs and the table is not among this node's tables any more.
gone(Tab, Local) ->
    mnesia:system_info(is_running) =:= yes andalso not lists:member(Tab, Local).

%% Start tracking a table copy: restored from disc, or a new incarnation that catches up.
take_up(Tab, #{type := Type, conflict := Policy, meta := Meta, log := Log}, S) ->
    Storage = mnesia:table_info(Tab, storage_type),
    Opts = #{tab => Tab, type => Type, policy => Policy,
             record => {mnesia:table_info(Tab, record_name), mnesia:table_info(Tab, arity)},
             cookie => mnesia:table_info(Tab, cookie), node => node(),
             incarnation => erlang:unique_integer([positive, monotonic])
                 + erlang:system_time(microsecond),
             members => copy_holders(Tab),
             store => hm_ec_store_mnesia:new(Tab, Meta, Log, Storage)},
    logger:info("hypermnesia: tracking ~p on this node (~p)", [Tab, Storage]),
    {T, Effs} = hm_ec_table:new(Opts),
    run(Tab, Effs, put_table(Tab, T, S)).

copy_holders(Tab) ->
    lists:usort(mnesia:table_info(Tab, ram_copies) ++ mnesia:table_info(Tab, disc_copies)).
