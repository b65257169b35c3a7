%% @doc The process of one EC table copy on this node (the Hypermnesia paper, §4.3: a
%% gen_server in front of the tagged causal stable broadcast), started by
%% {@link hm_ec_server} under {@link hm_ec_table_sup}. A thin shell around the per-table core
%% {@link hm_ec_table}: it holds the core's state on a Mnesia store
%% ({@link hm_ec_store_mnesia}), feeds it local calls, members' messages, ticks and node
%% events, and carries out the effects the core returns (sends, replies, timers, disc syncs,
%% log lines). Every operation of the table, local or remote, is applied in this process,
%% one at a time, in causal order: a key's read-modify-write is atomic, and tables do not
%% wait for each other.
%%
%% It is registered as {@link name/1} of the table on every copy holder, and members' messages
%% go to that name. It takes Mnesia's `mnesia_down' of a copy holder as that member going
%% down: when Mnesia alone restarts on a node there is no `nodedown', and what the node's
%% old copy acknowledged must stop counting for stability before its new copy exists. Every
%% `tick' (250 ms) the table acknowledges, retransmits what members reported they lack and
%% folds what became stable ({@link hm_ec_table:tick/2}); while it is busy it acknowledges
%% and folds every 20 ms between ticks as well ({@link hm_ec_table:acknowledge/2}). Other
%% members' operations wait in a queue of this process and are applied a few at a time
%% behind whatever else arrives (local calls, acks, ticks), so a heal's backlog never stalls
%% local writers. The process stops when its table is gone from this node (deleted, copy
%% removed, Mnesia stopped); the server takes the table up again when it is back. Dropped
%% messages (another table instance, a node that is not a member, an unknown shape) are
%% logged at most once every 10 s per kind. Operations bound for a member leave through an
%% {@link hm_ec_outbox}: the `async' ones made within a millisecond go as one message, so a
%% stream of updates costs a distribution message per member and millisecond, not per
%% update; everything else leaves at once, behind them, and each member receives the same
%% messages in the same order as when each left alone. Beside the core it holds the copy's
%% {@link hm_ec_watch} (partitions seen, catch-ups, state transfers), whose events it
%% publishes through {@link hm_events}. With the application variable `slow_step_ms' set
%% ({@link slow_limit/0}), it keeps the steps of the core that took at least that long, and
%% sums every step by kind; `info' shows both (`slow_steps', `step_totals').
-module(hm_ec_table_server).
-behaviour(gen_server).

-export([start_link/2, name/1, submit/4, submit/5, info/1, set_members/2, queued/1, log_drop/2,
         crdt_value/3]).
-export([status/2, flow_limit/0, catch_up_lag/1, log_limit/0, slow_limit/0]).
-export([init/1, handle_call/3, handle_cast/2, handle_info/2, terminate/2]).

%% the application variables' defaults (flow_limit/0, catch_up_lag/1, log_limit/0)
-define(FLOW_LIMIT, 5000).
-define(CATCH_UP_LAG, 10000).
-define(LOG_LIMIT, 100000).
%% keys per part of a state sent in parts (hm_ec_table_stream): about 1 MB of 100-byte
%% rows, joined in a few tens of milliseconds
-define(PART_KEYS, 5000).
%% keys a step of stabilization folds at most (hm_ec_table_stabilize): a few tens of
%% milliseconds of the table's process
-define(FOLD_KEYS, 5000).
%% how long an async operation waits in the outbox for others bound for the same member
-define(OUTBOX_MS, 1).
%% how many slow steps the diagnostic keeps (slow_limit/0)
-define(SLOW_KEPT, 64).

%%% ---------------------------------------------------------------- API

%% @doc Start the process of EC table `Tab' (its EC options from `hypermnesia:ec_options/1').
-spec start_link(atom(), map()) -> {ok, pid()} | {error, term()}.
start_link(Tab, EcOpts) -> gen_server:start_link({local, name(Tab)}, ?MODULE, {Tab, EcOpts}, []).

%% @doc The name the table's process is registered under, on every copy holder.
-spec name(atom()) -> atom().
name(Tab) ->
    %% on every write and every send: made once per table (atoms are never collected, and
    %% persistent_term:put/2 runs once per table name)
    case persistent_term:get({?MODULE, Tab}, undefined) of
        undefined ->
            Name = list_to_atom("hm_ec_table:" ++ atom_to_list(Tab)),
            persistent_term:put({?MODULE, Tab}, Name),
            Name;
        Name -> Name
    end.

%% @doc Apply an operation here and broadcast it (see {@link hm_ec_server:submit/3}).
-spec submit(pid() | atom() | {atom(), node()}, {term(), hm_ec_table:op()}, async | sync,
             timeout()) ->
          ok | {error, term()}.
submit(Server, KeyOp, Mode, Timeout) -> gen_server:call(Server, {submit, KeyOp, Mode}, Timeout).

%% @doc Apply a write passed on by a node whose session is `After' (see
%% {@link hm_ec_table:submit_after/6}): `{ok, Dot}', or `{error, {behind, Tab}}' when this
%% copy has not delivered the node's earlier writes yet. A dotted fragment's copy
%% ({@link hm_dotted_server}) answers a `sync' write with `ok' once the other copies hold it.
-spec submit(pid() | atom() | {atom(), node()}, {term(), hm_ec_table:op()}, async | sync,
             hm_vv:vv(), timeout()) ->
          ok | {ok, hm_vv:dot() | none} | {error, term()}.
submit(Server, KeyOp, Mode, After, Timeout) ->
    gen_server:call(Server, {submit_after, After, KeyOp, Mode}, Timeout).

%% @doc A CRDT table's value of `Key' on this copy, with the updates its row does not have
%% yet (see {@link hm_ec_table:crdt_value/2}).
-spec crdt_value(pid() | atom(), term(), timeout()) -> {ok, term()} | {error, term()}.
crdt_value(Server, Key, Timeout) ->
    %% the process lists the value's parts, the caller makes the value (a set's sort)
    case gen_server:call(Server, {crdt_value_parts, Key}, Timeout) of
        {ok, Parts} -> {ok, hm_crdt:finish_value(Parts)};
        Error -> Error
    end.

%% @doc Status of the table copy (see {@link hm_ec_table:info/2}).
-spec info(pid() | atom()) -> map().
info(Server) -> gen_server:call(Server, info, 5000).

%% @doc Status of the table copy for a cluster-wide view, with the digest of its rows and
%% its queue (see {@link hm_ec_watch:report/3}); reads every row of the copy when it
%% changed since the last call.
-spec status(pid() | atom(), timeout()) -> map().
status(Server, Timeout) -> gen_server:call(Server, status, Timeout).

%% @doc The table's copy holders are now `Members'.
-spec set_members(pid() | atom(), [node()]) -> ok.
set_members(Server, Members) -> gen_server:cast(Server, {members, Members}).

%% @doc How many members' operations wait in the process's queue.
-spec queued(pid() | atom()) -> non_neg_integer().
queued(Server) -> gen_server:call(Server, queued, 5000).

%%% ---------------------------------------------------------------- gen_server

-spec init({atom(), map()}) -> {ok, map()}.
init({Tab, EcOpts = #{type := Type, conflict := Policy, meta := Meta, log := Log}}) ->
    ok = net_kernel:monitor_nodes(true),
    %% stopped by its supervisor between two messages, never inside one: a write it began is
    %% done and answered, and one still waiting is answered by the stop (the caller passes
    %% it on to another holder, hm_ec_server:submit/3)
    process_flag(trap_exit, true),
    %% Mnesia alone restarting on another copy holder gives no nodedown, only mnesia_down
    {ok, _} = mnesia:subscribe(system),
    Storage = mnesia:table_info(Tab, storage_type),
    ok = check_catch_up_lag(),
    Opts = #{tab => Tab, type => Type, policy => Policy,
             record => {mnesia:table_info(Tab, record_name), mnesia:table_info(Tab, arity)},
             cookie => mnesia:table_info(Tab, cookie), node => node(),
             incarnation => erlang:unique_integer([positive, monotonic])
                 + erlang:system_time(microsecond),
             members => hm_ec_server:copy_holders(Tab),
             store => hm_ec_store_mnesia:new(Tab, Meta, Log, Storage),
             crdt => maps:get(crdt, EcOpts, none),
             epoch => maps:get(crdt_epoch, EcOpts, 100),
             flow => flow_limit(), catch_up => catch_up_lag(Tab), log_limit => log_limit(),
             part_keys => ?PART_KEYS, parts_late => parts_late(),
             fold_keys => ?FOLD_KEYS},
    logger:info("hypermnesia: tracking ~p on this node (~p)", [Tab, Storage]),
    {T, Effs} = hm_ec_table:new(Opts),
    Ref = make_ref(),
    erlang:send_after(hm_ec_table_schedule:tick_ms(), self(), {tick, Ref}),
    {ok, run(Effs, #{tab => Tab, t => T, tick_ref => Ref, ticks => 0,
                     work => hm_ec_table_schedule:new_queue(),
                     work_posted => false, ack_timer => false, drops => #{}, slow => slow_limit(),
                     totals => #{},
                     outbox => hm_ec_outbox:new(), outbox_timer => false,
                     watch => hm_ec_watch:new(clock(), T, Tab)})}.

-spec handle_call(term(), gen_server:from(), map()) ->
          {reply, term(), map()} | {noreply, map()} | {stop, normal, term(), map()}.
handle_call({submit, KeyOp, Mode}, From, S) ->
    handle_call({submit_after, none, KeyOp, Mode}, From, S);
handle_call(Submit = {submit_after, _, _, _}, From, S) ->
    timed(submit, fun() -> submit(Submit, From, S) end, S);
handle_call({crdt_value_parts, Key}, _From, S = #{t := T}) ->
    {reply, hm_ec_table:crdt_value_parts(Key, T), S};
handle_call(info, _From, S = #{t := T, slow := Slow}) ->
    Info = hm_ec_table:info(nodes(), T),
    {reply, case Slow of
                {_, Steps} -> Info#{slow_steps => lists:reverse(Steps),
                                    step_totals => maps:get(totals, S)};
                none -> Info
            end, S};
handle_call(status, _From, S = #{t := T, watch := W, work := Q}) ->
    {Report, W1} = hm_ec_watch:report(nodes(), T, W),
    {reply, Report#{queued_ops => hm_ec_table_schedule:queued(Q)}, S#{watch := W1}};
handle_call(queued, _From, S = #{work := Q}) ->
    {reply, hm_ec_table_schedule:queued(Q), S};
handle_call(Req, _From, S) ->
    {reply, {error, {unknown_request, Req}}, S}.

-spec handle_cast(term(), map()) -> {noreply, map()}.
handle_cast({members, Ms}, S = #{t := T}) ->
    {noreply, S#{t := hm_ec_table:set_members(Ms, T)}};
handle_cast(Msg, S) ->
    {noreply, drop({unknown_cast, Msg}, S)}.

-spec handle_info(term(), map()) -> {noreply, map()} | {stop, normal, map()}.
handle_info(Env, S = #{tab := Tab}) when element(1, Env) =:= hm_ec ->
    case hm_ec_wire:open(Env) of
        {ok, Tab, FromNode, {op, M}, Cookie} ->
            %% other members' operations wait in this process's own queue, applied a few at
            %% a time behind whatever else arrives meanwhile (work/1)
            {noreply, post_work(enqueue(Cookie, FromNode, [M], S))};
        {ok, Tab, FromNode, {ops, Msgs}, Cookie} when is_list(Msgs) ->
            %% a member's operations of a millisecond, or a retransmission round: in causal
            %% order, queued as they came (one entry, split only when applied)
            case Msgs of
                [] -> {noreply, S};
                _ -> {noreply, post_work(enqueue(Cookie, FromNode, Msgs, S))}
            end;
        {ok, Tab, FromNode, Msg, Cookie} ->
            %% an acknowledgement may make operations stable
            step(msg_kind(Msg), fun(T) -> hm_ec_table:handle(FromNode, Cookie, Msg, T) end,
                 arm_ack(S));
        {ok, Other, FromNode, _, _} ->
            {noreply, drop({other_table, Other, FromNode}, S)};
        {error, Why} ->
            {noreply, drop({bad_envelope, Why}, S)}
    end;
handle_info(hm_outbox, S) ->
    {noreply, flush_outbox(S#{outbox_timer := false})};
handle_info(hm_work, S) ->
    work(S#{work_posted := false});
handle_info(hm_ack, S) ->
    Up = nodes(),
    step(acknowledge, fun(T) -> hm_ec_table:acknowledge(Up, T) end, S#{ack_timer := false});
handle_info({tick, Ref}, S = #{tab := Tab, tick_ref := Ref, ticks := N}) ->
    %% only this process's own timer ticks (a stray `tick' must not start another chain)
    erlang:send_after(hm_ec_table_schedule:tick_ms(), self(), {tick, Ref}),
    %% a safety net: transactions stay refused on the table (hm_ec_mnesia)
    _ = [logger:warning("hypermnesia: ~p was open to transactions; closed again", [Tab])
         || N rem 4 =:= 0, {reclosed, _} <- [check_closed(Tab)]],
    Up = nodes(),
    %% a copy on disc may have been added, or a copy's type changed
    Lag = case N rem 4 of
              0 -> catch_up_lag(Tab);
              _ -> keep
          end,
    step(tick, fun(T0) ->
                       T = hm_ec_table:set_parts_late(parts_late(), T0),
                       hm_ec_table:tick(Up, case Lag of
                                                keep -> T;
                                                _ -> hm_ec_table:set_catch_up(Lag, T)
                                            end)
               end, S#{ticks := N + 1});
handle_info({hm_timer, Msg}, S) ->
    step(timer, fun(T) -> hm_ec_table:timeout(Msg, T) end, S);
handle_info({nodeup, N}, S) ->
    step(nodeup, fun(T) -> hm_ec_table:nodeup(N, T) end,
         watch_link(fun hm_ec_watch:link_up/4, N, S));
handle_info({nodedown, N}, S) ->
    step(nodedown, fun(T) -> hm_ec_table:nodedown(N, T) end,
         watch_link(fun hm_ec_watch:link_down/4, N, S));
handle_info({mnesia_system_event, {mnesia_down, N}}, S) when N =/= node() ->
    %% Mnesia stopped on N: its copy's state may be gone (a ram copy comes back empty, as a
    %% new incarnation): what it had acknowledged no longer counts. Mnesia handles this
    %% before N's Mnesia may join again, so before a new copy on N exists.
    step(mnesia_down, fun(T) -> hm_ec_table:nodedown(N, T) end, S);
handle_info({mnesia_system_event, _}, S) ->
    {noreply, S};
handle_info({'EXIT', _, _} = Exit, S) ->
    %% from a process it is linked to other than its supervisor (whose stop gen_server
    %% handles): nothing of its own
    {noreply, drop({linked_exit, Exit}, S)};
handle_info(Msg, S) ->
    {noreply, drop({unknown_message, Msg}, S)}.

%% @doc Stopped: `sync_ec' callers still waiting are answered ({@link hm_ec_table:stop/1}).
-spec terminate(term(), map()) -> ok.
terminate(_Reason, S = #{t := T}) ->
    {_, Effs} = hm_ec_table:stop(T),
    _ = run([E || E = {reply, _, _} <- Effs], S),
    %% what the members have not been sent yet (they would get it by retransmission from
    %% the other copies, or lose it with this copy's own operations if it was the last)
    _ = flush_outbox(S),
    ok.

%%% ---------------------------------------------------------------- running the core

%% A write of this node's callers: to the core, its effects run.
submit({submit_after, After, KeyOp, Mode}, From, S = #{t := T}) ->
    Now = erlang:system_time(microsecond),
    try case After of
            none -> hm_ec_table:submit(KeyOp, Mode, From, {Now, nodes()}, T);
            _ -> hm_ec_table:submit_after(After, KeyOp, Mode, From, {Now, nodes()}, T)
        end of
        {T1, Effs} -> {noreply, arm_ack(run(Effs, S#{t := T1}))}
    catch Class:Reason:Stack ->
            Reply = {error, {not_applied, Reason}},
            case failed(S, Class, Reason, Stack) of
                {stop, S1} -> {stop, normal, Reply, S1};
                S1 -> {reply, Reply, S1}
            end
    end.

%% One step of the core, then its effects. A table that no longer exists here (deleted, copy
%% removed, Mnesia stopped) ends the process; anything else is logged and the table keeps
%% its state.
step(Step, S = #{t := T}) ->
    try Step(T) of
        {T1, Effs} ->
            S1 = watch(run(Effs, S#{t := T1})),
            %% a step that built a state for a member grew the heap with the whole of it;
            %% it is garbage once sent, and would otherwise stay until the next collection,
            %% which a quiet table may not run for long
            _ = [erlang:garbage_collect() || lists:any(fun built_state/1, Effs)],
            {noreply, S1}
    catch Class:Reason:Stack ->
            case failed(S, Class, Reason, Stack) of
                {stop, S1} -> {stop, normal, S1};
                S1 -> {noreply, S1}
            end
    end.

built_state({send, _, {merge, _}}) -> true;
built_state({send, _, {snapshot, _}}) -> true;
built_state(_) -> false.

%% A step of the core of kind `Kind' (timed/3).
step(Kind, Step, S) -> timed(Kind, fun() -> step(Step, S) end, S).

%% Run `Step' (a step of kind `Kind' that returns the gen_server result). When the diagnostic
%% of slow steps is on it is timed: added to the totals of its kind, and kept when it took at
%% least the diagnostic's limit.
timed(_Kind, Step, #{slow := none}) -> Step();
timed(Kind, Step, #{slow := {Limit, _}}) ->
    T0 = erlang:monotonic_time(microsecond),
    {reductions, R0} = process_info(self(), reductions),
    R = Step(),
    Us = erlang:monotonic_time(microsecond) - T0,
    {reductions, R1} = process_info(self(), reductions),
    R2 = step_total(Kind, Us, R1 - R0, R),
    case Us >= Limit * 1000 of
        true -> slow_step(Kind, T0, Us, R1 - R0, R2);
        false -> R2
    end.

%% The sums of the steps by kind, `{Steps, Microseconds, Reductions}', shown by `info' as
%% `step_totals'.
step_total(Kind, Us, Reds, Result) ->
    in_result(fun(S = #{totals := Totals}) ->
                      {N0, Us0, R0} = maps:get(Kind, Totals, {0, 0, 0}),
                      S#{totals := Totals#{Kind => {N0 + 1, Us0 + Us, R0 + Reds}}}
              end, Result).

%% The diagnostic of slow steps (application variable `slow_step_ms'): each step of the
%% core that took at least that long is kept, the newest ?SLOW_KEPT, as
%% `{Kind, StartedAtMs, TookMs, Reductions}' (system time), and shown by `info'.
slow_step(Kind, T0, Us, Reds, Result) ->
    At = erlang:convert_time_unit(T0 + erlang:time_offset(microsecond), microsecond,
                                  millisecond),
    Step = {Kind, At, Us div 1000, Reds},
    in_result(fun(S = #{slow := {Limit, Steps}}) ->
                      S#{slow := {Limit, lists:sublist([Step | Steps], ?SLOW_KEPT)}}
              end, Result).

%% A gen_server callback result (`{noreply, S}', `{reply, R, S}', `{stop, ...}') with `F'
%% applied to its state, the last element.
in_result(F, Result) ->
    N = tuple_size(Result),
    setelement(N, Result, F(element(N, Result))).

%% What kind of step a member's message makes, for the diagnostic of slow steps.
msg_kind(Msg) when is_tuple(Msg), tuple_size(Msg) > 0, is_atom(element(1, Msg)) ->
    element(1, Msg);
msg_kind(_) ->
    other.

%% @doc The diagnostic of slow steps: the application variable `slow_step_ms', read when
%% the table's process starts. A positive integer turns it on (`{Ms, []}': the steps of the
%% core that take at least `Ms' milliseconds are kept and shown by `hypermnesia:info/1' as
%% `slow_steps'); `infinity', the default, turns it off (`none'), as does any other value,
%% which is logged.
-spec slow_limit() -> {pos_integer(), []} | none.
slow_limit() ->
    case limit_env(slow_step_ms, infinity) of
        infinity -> none;
        {bad, Bad} -> infinity = bad_limit(slow_step_ms, Bad, infinity), none;
        Ms -> {Ms, []}
    end.

%% A busy table acknowledges and stabilizes every hm_ec_table_schedule:ack_ms() between its
%% ticks: a write, a member's operations or an acknowledgement arm the timer, so an idle
%% table has none running (and sends no acknowledgement: only new ones go between ticks).
arm_ack(S = #{ack_timer := true}) -> S;
arm_ack(S) ->
    _ = erlang:send_after(hm_ec_table_schedule:ack_ms(), self(), hm_ack),
    S#{ack_timer := true}.

failed(S = #{tab := Tab}, _Class, {aborted, {no_exists, _}}, _Stack) ->
    logger:notice("hypermnesia: ~p is gone from this node", [Tab]),
    {stop, S};
failed(S = #{tab := Tab}, Class, Reason, Stack) ->
    logger:error("hypermnesia: ~p: ~p:~0p at ~0p", [Tab, Class, Reason, Stack]),
    S.

%% Fairness between this node's writers and other members' operations
%% (hm_ec_table_schedule): members' operations wait in the work queue and at most
%% hm_ec_table_schedule:work_batch() of them are applied per `hm_work' message, which goes
%% to the back of the mailbox: local calls, acks and ticks that came meanwhile go first.

post_work(S = #{work_posted := true}) -> S;
post_work(S) -> self() ! hm_work, S#{work_posted := true}.

work(S) -> work(hm_ec_table_schedule:work_batch(), S).

enqueue(Cookie, From, Ms, S = #{work := Q}) ->
    S#{work := hm_ec_table_schedule:enqueue(Cookie, From, Ms, Q)}.

work(0, S = #{work := Q}) ->
    case hm_ec_table_schedule:queued(Q) of
        0 -> {noreply, S};
        _ -> {noreply, post_work(S)}
    end;
work(N, S = #{work := Q}) ->
    case hm_ec_table_schedule:take(N, Q) of
        empty -> {noreply, S};
        {{Cookie, From, Ms}, Q1} ->
            %% up to N of one member's operations go to the core in one step; the rest of
            %% its message stays first in the queue
            case step(ops, fun(T) -> hm_ec_table:handle(From, Cookie, {ops, Ms}, T) end,
                      arm_ack(S#{work := Q1})) of
                {noreply, S1} -> work(N - length(Ms), S1);
                Stop -> Stop
            end
    end.

%% @doc The flow-control limit of a table's copy (option `flow' of {@link hm_ec_table}):
%% the application environment's `flow_limit' (operations, or `infinity': off; default
%% 5000), read when the table's process starts. Any other value logs a warning and counts
%% as the default.
-spec flow_limit() -> pos_integer() | infinity.
flow_limit() -> limit_or_default(flow_limit, ?FLOW_LIMIT).

%% @doc The bound on a table copy's log (option `log_limit' of {@link hm_ec_table}): the
%% application environment's `log_limit' (operations, or `infinity': off; default 100000),
%% read when the table's process starts; past it, a member unreachable for a few seconds
%% catches up by state when it returns. Any other value logs a warning and counts as the
%% default.
-spec log_limit() -> pos_integer() | infinity.
log_limit() -> limit_or_default(log_limit, ?LOG_LIMIT).

%% Whether the parts of a state sent in parts are read as each goes, and a large snapshot
%% goes in parts too (option `parts_late' of {@link hm_ec_table}): not while the cluster
%% speaks the previous wire version (a rolling upgrade), whose copies take no snapshot in
%% parts.
parts_late() -> hm_ec_wire:sending_version() >= 4.

%% An application variable that is a positive integer or `infinity', or (logged) `Default'.
limit_or_default(Key, Default) ->
    case limit_env(Key, Default) of
        {bad, Bad} -> bad_limit(Key, Bad, Default);
        Limit -> Limit
    end.

%% An application variable that is a positive integer or `infinity' (`Default' when
%% unset), or `{bad, Value}'.
limit_env(Key, Default) ->
    case application:get_env(hypermnesia, Key, Default) of
        N when is_integer(N), N > 0 -> N;
        infinity -> infinity;
        Bad -> {bad, Bad}
    end.

%% A bad application variable is logged; its default is used.
bad_limit(Key, Bad, Default) ->
    logger:warning("hypermnesia: ~p ~0p is not a positive integer or infinity; ~p is used",
                   [Key, Bad, Default]),
    Default.

%% @doc How far behind a member a copy of `Tab' may fall before it catches up by state
%% (option `catch_up' of {@link hm_ec_table}): the application environment's
%% `catch_up_lag' (operations, or `infinity': off; default 10000), or `infinity' when the
%% table has a copy on disc. Any other value counts as the default (and is logged when the
%% table's process starts).
-spec catch_up_lag(atom()) -> pos_integer() | infinity.
catch_up_lag(Tab) ->
    OnDisc = try mnesia:table_info(Tab, disc_copies) ++ mnesia:table_info(Tab, disc_only_copies)
             catch exit:_ -> []
             end,
    case {OnDisc, limit_env(catch_up_lag, ?CATCH_UP_LAG)} of
        {[_ | _], _} -> infinity;
        {[], {bad, _}} -> ?CATCH_UP_LAG;
        {[], Lag} -> Lag
    end.

%% Close `Tab' to transactions again if Mnesia reopened it; what that found, or `ok' when
%% Mnesia could not answer (stopping, or the table just deleted).
check_closed(Tab) ->
    try hm_ec_mnesia:check(Tab)
    catch _:_ -> ok
    end.

%% A bad `catch_up_lag' is logged once, when the table's process starts.
check_catch_up_lag() ->
    case limit_env(catch_up_lag, ?CATCH_UP_LAG) of
        {bad, Bad} -> _ = bad_limit(catch_up_lag, Bad, ?CATCH_UP_LAG), ok;
        _ -> ok
    end.

%% The watch of the copy: links, and what a step of the core completed (events published).
watch_link(Fun, N, S = #{t := T, watch := W}) -> S#{watch := Fun(N, clock(), T, W)}.

watch(S = #{t := T, watch := W}) ->
    {W1, Events} = hm_ec_watch:observe(clock(), T, W),
    _ = [hm_events:notify(Name, Info) || {Name, Info} <- Events],
    S#{watch := W1}.

clock() -> {erlang:monotonic_time(millisecond), erlang:system_time(millisecond)}.

%% The core's effects, in order.
run([], S) -> S;
run([E | Effs], S) -> run(Effs, effect(E, S)).

effect({send, Node, Msg}, S = #{outbox := Box}) ->
    {Now, Box1} = hm_ec_outbox:send(Node, Msg, Box),
    ok = send_now(Now, S),
    case S of
        #{outbox_timer := false} ->
            case hm_ec_outbox:is_empty(Box1) of
                true -> S#{outbox := Box1};
                false ->
                    _ = erlang:send_after(?OUTBOX_MS, self(), hm_outbox),
                    S#{outbox := Box1, outbox_timer := true}
            end;
        _ -> S#{outbox := Box1}
    end;
effect({reply, From, Reply}, S) -> gen_server:reply(From, Reply), S;
effect({timer, Ms, Msg}, S) -> erlang:send_after(Ms, self(), {hm_timer, Msg}), S;
effect({continue, Msg}, S) -> self() ! {hm_timer, Msg}, S;
effect({drop, What}, S) -> drop(What, S);
effect({info, Format, Args}, S) -> logger:info(Format, Args), S;
effect({event, _}, S) -> S.

flush_outbox(S = #{outbox := Box}) ->
    {Now, Box1} = hm_ec_outbox:flush(Box),
    ok = send_now(Now, S),
    S#{outbox := Box1}.

send_now([], _) -> ok;                      % held in the outbox (most operations)
send_now(Msgs, #{tab := Tab, t := T}) ->
    Cookie = hm_ec_table:cookie(T),
    lists:foreach(fun({Node, Msg}) ->
                          Envelope = hm_ec_wire:envelope(Tab, node(), Msg, Cookie),
                          send_to({name(Tab), Node}, Envelope,
                                  hm_ec_wire:is_state_transfer(Msg))
                  end, Msgs).

%% A message is dropped when the connection is busy (what is lost is sent again); a
%% state waits for room in a process of its own, so the table's process never waits on a
%% connection (one that hangs may take the distribution's tick time to fail). A state
%% dropped on a connection busy with a heal's traffic left the copy that asked for it
%% behind until it asked again, 2 s later (bench/REPORT.md).
send_to(Dest, Envelope, false) ->
    _ = erlang:send(Dest, Envelope, [noconnect, nosuspend]),
    ok;
send_to(Dest, Envelope, true) ->
    _ = spawn(fun() -> erlang:send(Dest, Envelope, [noconnect]) end),
    ok.

drop(What, S = #{drops := Drops}) -> S#{drops := log_drop(What, Drops)}.

%% @doc Log a dropped message, at most once every 10 s per kind (a flood of them must not
%% make the logger the bottleneck), with how many were dropped since; `Drops' is the caller's
%% count per kind.
-spec log_drop(term(), map()) -> map().
log_drop(What, Drops) ->
    Kind = drop_kind(What),
    Now = erlang:monotonic_time(millisecond),
    case maps:get(Kind, Drops, {0, 0}) of
        {Since, N} when Now - Since < 10000 ->
            Drops#{Kind => {Since, N + 1}};
        {_, N} ->
            logger:warning("hypermnesia: dropped ~0p (and ~p more like it before)", [What, N]),
            Drops#{Kind => {Now, 0}}
    end.

drop_kind({Reason, A, B}) -> {Reason, A, is_atom(B)};
drop_kind({Reason, A, _, _}) -> {Reason, A};
drop_kind({Reason, _}) -> Reason.
