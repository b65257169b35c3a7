%% @doc The one EC delivery process of a node (seed 000 §4.3: a gen_server in front of the
%% tagged causal stable broadcast). It holds, per EC table, the broadcast state
%% ({@link hm_tcsb}) and applies every operation, local or remote, to Mnesia storage with
%% {@link hm_ec_key}, in causal order and one at a time: so a key's read-modify-write is
%% atomic and no effect is applied in a spawned process.
%%
%% Storage per EC table `Tab' (all `local_content', on the table's copy holders):
%% `Tab' holds what reads show (one record per key, or every sibling); the key state of keys
%% storage alone cannot represent (causally unstable entries, or concurrent versions the
%% policy does not show) is kept apart: in `hm_meta_Tab' for a `disc_copies' table, in an ETS
%% table of this process for `ram_copies'. A quiescent table carries no metadata (FEATURES
%% X3). `hm_log_Tab' keeps, on disc only, the unstable operations and the delivered vector.
%%
%% Every `tick' (250 ms) it sends acknowledgements (eager: stability progresses when members
%% never write), folds causally stable keys and drops their metadata, forgets stable logged
%% operations, sends each member, as one `{ops, Msgs}' message, the logged operations it
%% reported it lacks ({@link hm_tcsb:resend_due/2}: causal order, an adaptive window), and
%% refreshes which tables are EC tables and who holds copies. On `nodeup' it forgets what the
%% returning member had; retransmission to it resumes from its first acknowledgement.
%% Messages from unknown nodes or of unknown shape are logged and dropped.
-module(hm_ec_server).
-behaviour(gen_server).

-export([start_link/0, submit/3, info/0, info/1, refresh/0, refresh_async/0, tick_ms/0]).
-export([init/1, handle_call/3, handle_cast/2, handle_info/2]).

-define(TICK_MS, 250).
-define(SYNC_TIMEOUT_MS, 30000).

%% What callers submit; the server stamps a write with its hybrid logical clock.
-type op() :: {write, tuple()} | delete | {delete_object, tuple()} | clear.
-type mode() :: async | sync.

%%% ---------------------------------------------------------------- API

-spec start_link() -> {ok, pid()} | {error, term()}.
start_link() -> gen_server:start_link({local, ?MODULE}, ?MODULE, [], []).

%% @doc Apply an operation on `Key' of EC table `Tab' here and broadcast it. `async' returns
%% once applied locally; `sync' once every reachable copy holder has applied it (and, for a
%% disc table, once the local write is on disc).
-spec submit(atom(), {term(), op()}, mode()) -> ok | {error, term()}.
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
    {ok, refresh_tables(#{tables => #{}, hlc => 0, ticks => 0, tick_ref => Ref,
                          inq => queue:new(), work_posted => false})}.

-spec handle_call(term(), gen_server:from(), map()) ->
          {reply, term(), map()} | {noreply, map()}.
handle_call({submit, Tab, KeyOp, Mode}, From, S) ->
    case table(Tab, S) of
        {ok, #{status := {syncing, _, _}}, S1} ->
            %% a copy that has not caught up yet has no causal context: an operation made now
            %% would be concurrent with every operation the others already folded as stable
            %% (a delete there would remove records it never saw). As in Mnesia before a table
            %% is loaded, it is refused until the state transfer is done.
            {reply, {error, {syncing, Tab}}, S1};
        {ok, T, S1} ->
            try do_submit(Tab, T, KeyOp, Mode, From, S1)
            catch Class:Reason:Stack ->
                    {reply, {error, {not_applied, Reason}}, failed(Tab, S1, Class, Reason, Stack)}
            end;
        error -> {reply, {error, {not_ec_table, Tab}}, S}
    end;
handle_call(info, _From, S = #{tables := Ts, inq := Q}) ->
    {reply, #{node => node(), queued_ops => queue:len(Q),
              tables => maps:map(fun(Tab, T) -> table_info(Tab, T) end, Ts)},
     S};
handle_call({info, Tab}, _From, S0) ->
    S = case hypermnesia:is_ec_table(Tab) of
            true -> S0;
            false -> refresh_tables(S0)            % deleted meanwhile: forget it now
        end,
    case table(Tab, S) of
        {ok, T, S1} -> {reply, table_info(Tab, T), S1};
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
handle_info({hm_sync_timeout, Tab, Dot}, S = #{tables := Ts}) ->
    case Ts of
        #{Tab := T = #{waiters := W = #{Dot := {Caller, Nodes}}}} ->
            gen_server:reply(Caller, {error, {sync_timeout, Nodes}}),
            {noreply, put_table(Tab, T#{waiters := maps:remove(Dot, W)}, S)};
        _ -> {noreply, S}
    end;
handle_info({nodeup, N}, S = #{tables := Ts}) ->
    %% a member is back, maybe as a new incarnation without its state: forget what it was
    %% known to have; retransmission to it resumes from its next acknowledgement (a tick)
    Ts1 = maps:map(fun(_Tab, T = #{tcsb := B}) -> T#{tcsb := hm_tcsb:forget_member(N, B)} end,
                   Ts),
    {noreply, S#{tables := Ts1}};
handle_info({nodedown, N}, S = #{tables := Ts}) ->
    %% a sync_ec caller no longer waits for a member it cannot reach; what the member had is
    %% relearned from its next acknowledgement (it may restart without its state)
    Forget = fun(_, T = #{tcsb := B}) ->
                     forget_waiter_node(N, T#{tcsb := hm_tcsb:forget_member(N, B)})
             end,
    {noreply, S#{tables := maps:map(Forget, Ts)}};
handle_info(Msg, S) ->
    drop({unknown_message, Msg}, S).

%% A message names the table and its instance (Mnesia's creation cookie): one for a table
%% deleted and created again under the same name (still in flight, or queued here) is
%% dropped, else the old table's operations would show up in the new one.
member_msg(Tab, Cookie, FromNode, Msg, S = #{tables := Ts}) ->
    case Ts of
        #{Tab := #{cookie := Other}} when Other =/= Cookie ->
            element(2, drop({other_table_instance, Tab, FromNode}, S));
        #{Tab := T} ->
            case lists:member(FromNode, hm_tcsb:members(maps:get(tcsb, T))) of
                true -> guard(Tab, S, fun() -> remote(Tab, T, FromNode, Msg, S) end);
                false -> element(2, drop({not_a_member, FromNode, Tab}, S))
            end;
        _ -> element(2, drop({unknown_table, Tab, FromNode}, S))
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

%% One table's trouble never takes the node's other tables down: a table that no longer
%% exists here (deleted, copy removed) is forgotten; anything else is logged and the table
%% keeps its previous state.
guard(Tab, S, Fun) ->
    try Fun()
    catch Class:Reason:Stack -> failed(Tab, S, Class, Reason, Stack)
    end.

failed(Tab, S = #{tables := Ts}, _Class, {aborted, {no_exists, _}}, _Stack) ->
    logger:notice("hypermnesia: ~p is gone from this node", [Tab]),
    _ = [forget(T) || #{Tab := T} <- [Ts]],
    S#{tables := maps:remove(Tab, Ts)};
failed(Tab, S, Class, Reason, Stack) ->
    logger:error("hypermnesia: ~p: ~p:~0p at ~0p", [Tab, Class, Reason, Stack]),
    S.

%% Log a dropped message, at most once every 10 s per kind (a flood of them must not make
%% the logger the bottleneck), with how many were dropped since.
drop(What, S) ->
    Kind = drop_kind(What),
    Now = erlang:monotonic_time(millisecond),
    Drops = maps:get(drops, S, #{}),
    case maps:get(Kind, Drops, {0, 0}) of
        {Since, N} when Now - Since < 10000 ->
            {noreply, S#{drops => Drops#{Kind => {Since, N + 1}}}};
        {_, N} ->
            logger:warning("hypermnesia: dropped ~0p (and ~p more like it before)", [What, N]),
            {noreply, S#{drops => Drops#{Kind => {Now, 0}}}}
    end.

drop_kind({Reason, A, B}) -> {Reason, A, is_atom(B)};
drop_kind({Reason, A, _, _}) -> {Reason, A};
drop_kind({Reason, _}) -> Reason.

%%% ---------------------------------------------------------------- local operations

do_submit(Tab, T = #{tcsb := B}, {Key, Op0}, Mode, From, S = #{hlc := H0}) ->
    {Op, H1} = stamp(Op0, H0),
    {Msg = {Self, Ts, _}, Out, B1} = hm_tcsb:broadcast({Mode, Key, Op}, B),
    T1 = apply_op(Tab, T#{tcsb := B1}, Msg),
    [send(N, Tab, M) || {N, M} <- Out],
    ok = durable(T1, Mode),
    S1 = S#{hlc := H1},
    Reachable = [N || {N, _} <- Out, lists:member(N, nodes())],
    case {Mode, Reachable} of
        {sync, [_ | _]} ->
            Dot = {Self, maps:get(Self, Ts)},
            Waiters = maps:get(waiters, T1),
            T2 = T1#{waiters := Waiters#{Dot => {From, Reachable}}},
            erlang:send_after(?SYNC_TIMEOUT_MS, self(), {hm_sync_timeout, Tab, Dot}),
            {noreply, put_table(Tab, T2, S1)};
        _ ->
            {reply, ok, put_table(Tab, T1, S1)}
    end.

%% Hybrid logical clock for lww: the wall clock, never behind what was seen.
stamp({write, Rec}, H) ->
    H1 = max(erlang:system_time(microsecond), H + 1),
    {{write, Rec, {H1, node()}}, H1};
stamp(Op, H) -> {Op, H}.

durable(#{storage := disc_copies}, sync) -> mnesia:sync_log();
durable(_, _) -> ok.

%%% ---------------------------------------------------------------- remote messages

remote(Tab, T = #{status := {syncing, Raw, Empty}}, From, {op, Msg}, S) ->
    %% not caught up yet: keep it for after the state transfer
    case valid_op_msg(Msg) of
        false -> element(2, drop({bad_op_message, Tab, From}, S));
        true -> put_table(Tab, T#{status := {syncing, [Msg | Raw], Empty}}, S)
    end;
remote(Tab, T, From, {snapshot_req}, S) ->
    send(From, Tab, snapshot(Tab, T)),
    put_table(Tab, T, S);
remote(Tab, T = #{status := {syncing, _, _}}, _From, {snapshot, Snap = #{rows := Rows}}, S)
  when is_list(Rows) ->
    install(Tab, T, Snap, S);
remote(Tab, T = #{status := {syncing, Raw, Empty}}, From, {snapshot_empty}, S) ->
    %% only when every other member holds nothing may this one start from nothing too
    Empty1 = lists:usort([From | Empty]),
    case hm_tcsb:members(maps:get(tcsb, T)) -- [node() | Empty1] of
        [] -> install(Tab, T, empty_snapshot(), S);
        _ -> put_table(Tab, T#{status := {syncing, Raw, Empty1}}, S)
    end;
remote(_Tab, _T, _From, {snapshot, _}, S) ->
    S;                                          % already caught up
remote(_Tab, _T, _From, {snapshot_empty}, S) ->
    S;
remote(Tab, T = #{tcsb := B}, From, {op, Msg}, S = #{hlc := H}) ->
    case valid_op_msg(Msg) andalso fits(T, Msg) of
        false -> element(2, drop({bad_op_message, Tab, From}, S));
        true ->
            {Ready, B1} = hm_tcsb:receive_op(Msg, B),
            T1 = lists:foldl(fun(M, Acc) -> apply_op(Tab, Acc, M) end, T#{tcsb := B1}, Ready),
            %% sync_ec callers at the origin wait for this: acknowledge every sync operation
            %% delivered here, duplicates included (a state transfer may have brought its
            %% effect before the operation itself arrived)
            Delivered = hm_tcsb:delivered(B1),
            [send(ON, Tab, {applied, Dot})
             || {O = {ON, _}, Ts, {sync, _, _}} <- lists:usort([Msg | Ready]),
                Dot <- [{O, maps:get(O, Ts)}], hm_vv:contains(Dot, Delivered)],
            H1 = lists:foldl(fun({_, _, {_, _, {write, _, {Hx, _}}}}, Acc) -> max(Acc, Hx);
                                (_, Acc) -> Acc
                             end, H, Ready),
            put_table(Tab, T1, S#{hlc := H1})
    end;
remote(Tab, T = #{tcsb := B}, _From, {ack, Replica = {N, _}, V, Newest}, S)
  when is_atom(N), is_map(V), is_map(Newest) ->
    put_table(Tab, T#{tcsb := hm_tcsb:receive_ack(Replica, V, Newest, B)}, S);
remote(Tab, T = #{waiters := W}, From, {applied, Dot}, S) ->
    case W of
        #{Dot := {Caller, Nodes}} ->
            case lists:delete(From, Nodes) of
                [] -> gen_server:reply(Caller, ok),
                      put_table(Tab, T#{waiters := maps:remove(Dot, W)}, S);
                Rest -> put_table(Tab, T#{waiters := W#{Dot := {Caller, Rest}}}, S)
            end;
        _ -> S
    end;
remote(_Tab, _T, _From, {snapshot_none}, S) ->
    S;                                          % that member cannot help yet
remote(Tab, _T, From, Other, S) ->
    element(2, drop({bad_message, Tab, From, Other}, S)).

%%% ---------------------------------------------------------------- state transfer

%% What a member that is caught up sends to one that is not: everything reads show, the
%% metadata of unstable keys, the delivered vector they reflect, the logged operations not yet
%% stable (so the receiver can pass them on should their origin die) and the unstable clears
%% (one process made them all, so they agree). A member still syncing that holds nothing from
%% anyone else says so; a replica starts from nothing only when every other member said so
%% (the members of a brand-new table), never because some member that lost its state did.
snapshot(Tab, T = #{status := ready, tcsb := B, clears := Cs}) ->
    {snapshot, #{rows => ets_rows(Tab), meta => meta_rows(T), delivered => hm_tcsb:delivered(B),
                 log => hm_tcsb:log_msgs(B), clears => Cs}};
snapshot(_Tab, #{status := {syncing, _, _}, tcsb := B}) ->
    case only_own(B) of
        true -> {snapshot_empty};
        false -> {snapshot_none}
    end.

%% Nothing delivered from anyone else (a syncing copy makes no operation of its own: it
%% refuses writes until it has installed a state).
only_own(B) -> maps:keys(hm_tcsb:delivered(B)) -- [hm_tcsb:self(B)] =:= [].

empty_snapshot() -> #{rows => [], meta => [], delivered => #{}, log => [], clears => []}.

ets_rows(Tab) -> mnesia:dirty_select(Tab, [{'_', [], ['$_']}]).

%% Install a member's state, then deliver what arrived meanwhile. A syncing copy refuses
%% writes, so it has no operation of its own to carry over.
install(Tab, T = #{tcsb := Old, status := {syncing, Raw, _}},
        #{rows := Rows, meta := MetaRows, delivered := V, log := Log, clears := Clears}, S) ->
    Log0 = maps:get(log, T),
    [mnesia:dirty_delete(Log0, K) || K <- mnesia:dirty_all_keys(Log0)],
    [storage_delete(Tab, K) || K <- mnesia:dirty_all_keys(Tab)],
    [meta_del(T, K) || K <- meta_keys(T)],
    [storage_write(Tab, R) || R <- Rows],
    [meta_put(T, K, KS) || {hm_meta, K, KS} <- MetaRows],
    B0 = hm_tcsb:restore_log(Log, hm_tcsb:new(hm_tcsb:self(Old), hm_tcsb:members(Old), V)),
    T0 = persist_clears(T#{tcsb := B0, status := ready, clears := Clears}),
    [persist(T0, M) || M <- Log],
    S0 = put_table(Tab, T0, S),
    logger:info("hypermnesia: ~p caught up (~p rows)", [Tab, length(Rows)]),
    lists:foldl(fun(M, Acc) -> remote(Tab, maps:get(Tab, maps:get(tables, Acc)), node(),
                                      {op, M}, Acc)
                end, S0, lists:reverse(Raw)).

valid_op_msg(Msg = {{N, _}, _, {Mode, _Key, Op}}) when is_atom(N) ->
    hm_causal_buffer:is_message(Msg) andalso (Mode =:= async orelse Mode =:= sync)
        andalso valid_op(Op);
valid_op_msg(_) -> false.

%% A record operation names its record's own key, and the record fits the table.
fits(#{record := {Name, Arity}}, {_, _, {_, Key, Op}}) ->
    case Op of
        {write, Rec, _} -> fits_record(Rec, Key, Name, Arity);
        {delete_object, Rec} -> fits_record(Rec, Key, Name, Arity);
        _ -> true
    end.

fits_record(Rec, Key, Name, Arity) ->
    tuple_size(Rec) =:= Arity andalso element(1, Rec) =:= Name andalso element(2, Rec) =:= Key.

valid_op({write, Rec, {H, N}}) -> is_tuple(Rec) andalso is_integer(H) andalso is_atom(N);
valid_op(delete) -> true;
valid_op({delete_object, Rec}) -> is_tuple(Rec);
valid_op(clear) -> true;
valid_op(_) -> false.

forget_waiter_node(N, T = #{waiters := W}) ->
    W1 = maps:fold(fun(Dot, {Caller, Nodes}, Acc) ->
                           case lists:delete(N, Nodes) of
                               [] -> gen_server:reply(Caller, ok), Acc;
                               Rest -> Acc#{Dot => {Caller, Rest}}
                           end
                   end, #{}, W),
    T#{waiters := W1}.

%%% ---------------------------------------------------------------- effects on storage

%% Apply a causally delivered operation to Mnesia storage (seed 000 Algorithm 2).
apply_op(Tab, T, Msg) ->
    T1 = effect(Tab, T, Msg),
    persist(T1, Msg),
    T1.

effect(Tab, T, {Origin, Ts, {_Mode, _Key, clear}}) ->
    Keys = lists:usort(mnesia:dirty_all_keys(Tab) ++ meta_keys(T)),
    T1 = lists:foldl(fun(K, Acc) -> apply_key(Tab, Acc, Origin, Ts, K, delete) end, T, Keys),
    %% remove-wins: the clear also beats writes concurrent with it that arrive later, on keys
    %% not here yet; kept until stable (add-wins: a delete beats nothing it has not seen).
    %% `Handled': keys where the clear's delete is settled (it was applied here, or an
    %% operation that follows the clear has been applied and superseded it).
    case T of
        #{type := prwset, clears := Cs} ->
            Handled = maps:from_list([{K, true} || K <- Keys]),
            persist_clears(T1#{clears := [{{Origin, maps:get(Origin, Ts)}, Ts, Handled} | Cs]});
        _ -> T1
    end;
effect(Tab, T = #{clears := []}, {Origin, Ts, {_Mode, Key, Op}}) ->
    apply_key(Tab, T, Origin, Ts, Key, Op);
effect(Tab, T = #{clears := Cs}, {Origin, Ts, {_Mode, Key, Op}}) ->
    %% first, every unstable clear that has not touched the key yet leaves on it the delete it
    %% would have left had the key been here when the clear arrived (same dot and vector),
    %% oldest clear first; then the operation. One that follows the clear prunes that delete
    %% (hm_ec_key), one concurrent with it loses to it (remove-wins), whatever arrives first.
    {Cs1, T1} = lists:mapfoldl(
                  fun(C = {{CO, _} = CDot, CTs, Handled}, Acc) ->
                          case maps:is_key(Key, Handled) of
                              true -> {C, Acc};
                              false -> {{CDot, CTs, Handled#{Key => true}},
                                        apply_key(Tab, Acc, CO, CTs, Key, delete)}
                          end
                  end, T, lists:reverse(Cs)),
    T2 = apply_key(Tab, T1, Origin, Ts, Key, Op),
    persist_clears(T2#{clears := lists:reverse(Cs1)}, Cs).

%% disc_copies: the unstable clears survive a restart too.
persist_clears(T) -> persist_clears(T, undefined).

persist_clears(T = #{clears := Cs}, Cs) -> T;             % unchanged
persist_clears(T = #{storage := disc_copies, log := Log, clears := Cs}, _) ->
    mnesia:dirty_write(Log, {hm_log, clears, Cs}),
    T;
persist_clears(T, _) -> T.

%% disc_copies (FEATURES X2): after the effect, log the operation (until it is stable, for
%% retransmission) and what this replica has delivered. Mnesia's log is append-only, so a crash
%% loses a suffix: at worst an effect whose delivery was not recorded, delivered again after
%% the restart, and effects are idempotent.
persist(#{storage := disc_copies, log := Log, tcsb := B}, Msg = {Origin, Ts, _}) ->
    mnesia:dirty_write(Log, {hm_log, {Origin, maps:get(Origin, Ts)}, Msg}),
    mnesia:dirty_write(Log, {hm_log, state, {hm_tcsb:self(B), hm_tcsb:delivered(B)}});
persist(_, _) -> ok.

apply_key(Tab, T = #{type := Type}, Origin, Ts, Key, Op) ->
    {KS, Shown} = key_state(Tab, T, Key),
    KS1 = hm_ec_key:effect(Type, Op, {Origin, maps:get(Origin, Ts)}, Ts, KS),
    store(Tab, T, Key, KS1, Shown),
    T.

%% The key's state, and what storage shows for it when that was read on the way.
key_state(Tab, T, Key) ->
    case meta_get(T, Key) of
        {ok, KS} -> {KS, unknown};
        none -> Rows = mnesia:dirty_read(Tab, Key), {hm_ec_key:new(Rows), Rows}
    end.

%% Write what reads show, and the key's metadata only while storage alone does not say it all.
store(Tab, T = #{type := Type, policy := Policy}, Key, KS, Shown) ->
    show(Tab, Key, hm_ec_key:view(Type, Policy, KS), Policy, Shown),
    store_meta(T, Key, KS).

store_meta(T = #{type := Type, policy := Policy}, Key, KS) ->
    case hm_ec_key:compact(Type, Policy, KS) of
        none -> meta_del(T, Key);
        KS1 -> meta_put(T, Key, KS1)
    end.

%% What reads show for a key, written only when it changed.
show(Tab, Key, View, Policy, unknown) ->
    show(Tab, Key, View, Policy, mnesia:dirty_read(Tab, Key));
show(Tab, Key, View, Policy, Shown) ->
    case {Shown, View} of
        {View, _} -> ok;
        {_, []} -> storage_delete(Tab, Key);
        {_, [R]} when Policy =/= siblings -> storage_write(Tab, R);  % a set: replaces
        _ ->
            storage_delete(Tab, Key),
            lists:foreach(fun(R) -> storage_write(Tab, R) end, View)
    end.

%% Storage writes. An EC table is `read_only' for Mnesia (see hypermnesia:create_table/2):
%% transactions cannot write it; hm_ec_mnesia opens the local copy for this server's dirty
%% writes, keeps transactions refused, and reopens after Mnesia recomputed the commit targets.
storage_write(Tab, R) -> hm_ec_mnesia:write(Tab, R).

storage_delete(Tab, Key) -> hm_ec_mnesia:delete(Tab, Key).

open_storage(Tab) -> hm_ec_mnesia:open(Tab).

%% Causal stability (seed 000 §4.7): keys whose entries are all stable lose their timestamps,
%% and their metadata row when storage alone says it all.
stabilize(T = #{tcsb := B}) ->
    case hm_tcsb:stable(B) of
        V when V =:= map_get(stable_seen, T) -> T;    % nothing new is stable: no key to fold
        V -> stabilize(T#{stable_seen := V}, V)
    end.

stabilize(T = #{type := Type, policy := Policy, tcsb := B}, V) ->
    %% stabilization never changes what reads show (hm_ec_prop checks it), so only the
    %% metadata is rewritten
    lists:foreach(
      fun(Key) ->
              {ok, KS} = meta_get(T, Key),
              case hm_ec_key:stabilize(Type, Policy, {V, KS}) of
                  KS -> ok;
                  KS1 -> store_meta(T, Key, KS1)
              end
      end, meta_keys(T)),
    Clears = [C || C = {D, _, _} <- maps:get(clears, T), not hm_vv:contains(D, V)],
    {Gone, B1} = hm_tcsb:gc_dots(B),
    _ = case T of
            #{storage := disc_copies, log := Log} -> [mnesia:dirty_delete(Log, D) || D <- Gone];
            _ -> ok
        end,
    persist_clears(T#{tcsb := B1, clears := Clears}, maps:get(clears, T)).

%%% ---------------------------------------------------------------- ticks and tables

tick(S = #{ticks := N}) ->
    S1 = case N rem 4 of
             0 -> refresh_tables(S);
             _ -> S
         end,
    S2 = maps:fold(fun(Tab, T, Acc) -> guard(Tab, Acc, fun() -> tick_table(Tab, T, Acc) end) end,
                   S1, maps:get(tables, S1)),
    S2#{ticks := N + 1}.

tick_table(Tab, T = #{tcsb := B0}, S) ->
    Up = nodes(),
    [send(M, Tab, Ack) || {M, Ack} <- hm_tcsb:acks(B0), lists:member(M, Up)],
    B = lists:foldl(fun(M, Bx) ->
                            {Msgs, By} = hm_tcsb:resend_due(M, Bx),
                            [send(M, Tab, {ops, Msgs}) || Msgs =/= []],
                            By
                    end, B0, [M || M <- hm_tcsb:members(B0), lists:member(M, Up)]),
    [send(M, Tab, {snapshot_req}) || syncing(T), M <- hm_tcsb:members(B), lists:member(M, Up)],
    T1 = stabilize(T#{tcsb := B}),
    put_table(Tab, T1#{tcsb := hm_tcsb:tick(maps:get(tcsb, T1))}, S).

syncing(#{status := {syncing, _, _}}) -> true;
syncing(_) -> false.

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

%% EC tables with a local copy, and their copy holders, from Mnesia's schema.
refresh_tables(S = #{tables := Ts}) ->
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
    Ts1 = maps:map(fun(Tab, T = #{tcsb := B}) ->
                           case catch copy_holders(Tab) of
                               Ms when is_list(Ms) -> T#{tcsb := hm_tcsb:set_members(Ms, B)};
                               _ -> T
                           end
                   end, Kept),
    Ts2 = lists:foldl(
            fun({Tab, Opts = #{meta := M, log := L}}, Acc) ->
                    case mnesia:wait_for_tables([Tab, M, L], 0) of
                        ok -> Acc#{Tab => new_table(Tab, Opts)};
                        _ -> Acc
                    end
            end, Ts1, Ec),
    S#{tables := Ts2}.

replaced(Tab, #{cookie := Cookie}) ->
    case catch mnesia:table_info(Tab, cookie) of
        Cookie -> false;
        {{_, _, _}, _} -> true;                    % another instance's cookie
        _ -> false                                 % not readable now: keep the state
    end.

forget(#{meta := {ets, Ets}}) -> catch ets:delete(Ets), ok;
forget(_) -> ok.

%% Gone for sure: Mnesia runs and the table is not among this node's tables any more.
gone(Tab, Local) ->
    mnesia:system_info(is_running) =:= yes andalso not lists:member(Tab, Local).

new_table(Tab, #{type := Type, conflict := Policy, meta := Meta, log := Log}) ->
    Members = copy_holders(Tab),
    Storage = mnesia:table_info(Tab, storage_type),
    %% The metadata of unstable keys: on disc with a disc_copies table; for ram_copies in a
    %% table of this process (as volatile as the copy, and much cheaper than Mnesia's).
    MetaStore = case Storage of
                    disc_copies -> {mnesia, Meta};
                    _ -> {ets, ets:new(hm_meta, [set, protected])}
                end,
    %% the table's instance, named in every message (member_msg/5)
    Cookie = mnesia:table_info(Tab, cookie),
    put({hm_cookie, Tab}, Cookie),
    T = #{type => Type, policy => Policy, meta => MetaStore, log => Log, storage => Storage,
          cookie => Cookie,
          record => {mnesia:table_info(Tab, record_name), mnesia:table_info(Tab, arity)},
          waiters => #{}, clears => [], stable_seen => undefined},
    open_storage(Tab),
    logger:info("hypermnesia: tracking ~p on this node (~p)", [Tab, Storage]),
    case {Storage, mnesia:dirty_read(Log, state)} of
        {disc_copies, [{hm_log, state, {Self, Delivered}}]} ->
            %% a restart with the table on disc: the same replica, its unstable operations
            %% still logged (they are resent to whoever lacks them)
            Logged = [M || {hm_log, {_, _}, M} <- ets_rows(Log)],
            Clears = [C || {hm_log, clears, Cs} <- ets_rows(Log), C <- Cs],
            B = hm_tcsb:restore_log(Logged, hm_tcsb:new(Self, Members, Delivered)),
            logger:info("hypermnesia: ~p restored from disc (~p unstable operations)",
                        [Tab, length(Logged)]),
            T#{tcsb => B, status => ready, clears := Clears};
        _ ->
            Incarnation = erlang:unique_integer([positive, monotonic])
                + erlang:system_time(microsecond),
            %% with other members, catch up from one of them first (see install/6)
            Status = case Members -- [node()] of
                         [] -> ready;
                         Others -> [send(N, Tab, {snapshot_req}) || N <- Others],
                                   {syncing, [], []}
                     end,
            T#{tcsb => hm_tcsb:new({node(), Incarnation}, Members), status => Status}
    end.

copy_holders(Tab) ->
    lists:usort(mnesia:table_info(Tab, ram_copies) ++ mnesia:table_info(Tab, disc_copies)).

table_info(Tab, T = #{type := Type, policy := Policy, tcsb := B, waiters := W}) ->
    #{table => Tab, type => Type, conflict => Policy,
      status => case syncing(T) of true -> syncing; false -> ready end,
      members => hm_tcsb:members(B),
      reachable => [N || N <- hm_tcsb:members(B), N =:= node() orelse lists:member(N, nodes())],
      delivered => hm_tcsb:delivered(B),
      stable => hm_tcsb:stable(B),
      buffered_ops => hm_tcsb:pending(B),
      unstable_ops => hm_tcsb:log_size(B),
      unstable_keys => meta_size(T),
      metadata_words => meta_words(T),
      size => mnesia:table_info(Tab, size),
      sync_waiting => map_size(W)}.

%%% ---------------------------------------------------------------- metadata store

meta_get(#{meta := {ets, E}}, Key) ->
    case ets:lookup(E, Key) of
        [{_, KS}] -> {ok, KS};
        [] -> none
    end;
meta_get(#{meta := {mnesia, M}}, Key) ->
    case mnesia:dirty_read(M, Key) of
        [{hm_meta, _, KS}] -> {ok, KS};
        [] -> none
    end.

meta_put(#{meta := {ets, E}}, Key, KS) -> ets:insert(E, {Key, KS});
meta_put(#{meta := {mnesia, M}}, Key, KS) -> mnesia:dirty_write(M, {hm_meta, Key, KS}).

meta_del(#{meta := {ets, E}}, Key) -> ets:delete(E, Key);
meta_del(#{meta := {mnesia, M}}, Key) -> mnesia:dirty_delete(M, Key).

meta_keys(#{meta := {ets, E}}) -> [K || {K, _} <- ets:tab2list(E)];
meta_keys(#{meta := {mnesia, M}}) -> mnesia:dirty_all_keys(M).

meta_rows(#{meta := {ets, E}}) -> [{hm_meta, K, KS} || {K, KS} <- ets:tab2list(E)];
meta_rows(#{meta := {mnesia, M}}) -> ets_rows(M).

meta_size(#{meta := {ets, E}}) -> ets:info(E, size);
meta_size(#{meta := {mnesia, M}}) -> mnesia:table_info(M, size).

meta_words(#{meta := {ets, E}}) -> ets:info(E, memory);
meta_words(#{meta := {mnesia, M}}) -> mnesia:table_info(M, memory).

send(Node, Tab, Msg) ->
    Envelope = {hm_ec, Tab, node(), Msg, get({hm_cookie, Tab})},
    _ = erlang:send({?MODULE, Node}, Envelope, [noconnect, nosuspend]),
    ok.
