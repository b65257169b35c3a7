%% @doc One EC table copy, pure: the per-table core that the runtime's server and the
%% simulator both run (the Hypermnesia paper, *Hypermnesia: Eventual Consistency in Mnesia*,
%% §4.3–4.9: a server in front of tagged causal stable broadcast, applying Algorithm 2 to
%% storage in causal order).
%%
%% State in, new state and effects out. The caller carries out the effects:
%% <ul>
%% <li>`{send, Node, Msg}': a message to the table's process on `Node';</li>
%% <li>`{reply, From, Reply}': the answer to a caller of {@link submit/5};</li>
%% <li>`{timer, Ms, Msg}': give `Msg' back to {@link timeout/2} in `Ms' ms;</li>
%% <li>`{continue, Msg}': give `Msg' back to {@link timeout/2} after what is waiting now
%% (work cut into steps, so that writers and members' messages go between them);</li>
%% <li>`{drop, What}': a message was dropped (log it);</li>
%% <li>`{info, Format, Args}': something worth a log line;</li>
%% <li>`{event, Event}' (only with option `events'): what the simulator's checkers look at:
%% `{applied, Msg}', `{installed, Delivered}', `{stabilized, Dots}'.</li>
%% </ul>
%% Storage goes through {@link hm_ec_store} (Mnesia at run time, maps in the simulator); a
%% `disc_copies' store is synced ({@link hm_ec_store:sync/1}) before anything that must not
%% be taken back by a crash leaves the copy: a `sync' write's message and answer, a snapshot,
%% an acknowledgement.
%%
%% This module dispatches; each step's own logic lives in a module of its own, all of them
%% pure over the same state (`hm_ec_table.hrl'):
%% <ul>
%% <li>{@link hm_ec_table_receive}: Algorithm 1's receive step for a member's operations;</li>
%% <li>{@link hm_ec_table_apply}: Algorithm 2, a delivered operation's effect on storage, and
%% the disc log;</li>
%% <li>{@link hm_ec_table_stabilize}: causal stability;</li>
%% <li>{@link hm_ec_table_flow}: flow control between copies;</li>
%% <li>{@link hm_ec_table_catch_up}: catching up by state;</li>
%% <li>{@link hm_ec_table_stream}: a state sent, received and joined in parts;</li>
%% <li>{@link hm_ec_table_transfer}: state transfer to a copy without state;</li>
%% <li>{@link hm_ec_table_restore}: a disc copy's restart from its log;</li>
%% <li>{@link hm_ec_table_write_behind}: CRDT tables' rows and broadcast epochs.</li>
%% </ul>
%%
%% The steps, in the paper's words:
%% <ul>
%% <li>{@link submit/5}: a local operation is timestamped ("on broadcast"), applied here and
%% sent to every member; `sync' answers once every reachable member applied it.</li>
%% <li>{@link handle/4}: a member's message, after checking it names this table instance, comes
%% from a member and has a valid shape: an operation is delivered in causal order ("on
%% receive") and applied, a member's batch of them in one pass; acknowledgements feed
%% stability; snapshot requests are answered.</li>
%% <li>{@link tick/2}: acknowledgements, retransmission ({@link hm_tcsb:resend_due/2}), a
%% snapshot request while syncing, and stabilization: keys whose entries are all causally
%% stable (§4.7) lose their timestamps and, when storage alone says it all, their metadata.
%% Only the keys of the operations that just became stable are looked at (a key's entries
%% are stable once its last unstable operation is), so a tick costs what became stable, not
%% the number of unstable keys. A table of records folds at most the option `fold_keys'
%% keys (default `infinity') in one step and the rest in the steps after
%% ({@link hm_ec_table_stabilize}).</li>
%% <li>{@link acknowledge/2}: the acknowledgements and stabilization of a tick, run between
%% ticks while the table is busy, so that stability follows the load closely.</li>
%% <li>Flow control: the answer to an `async' write waits while a member that keeps up
%% lags on this copy's operations by more than the option `flow' (operations, default
%% 5,000) beyond the least it lagged by, and goes when its acknowledgements say it caught
%% up (or after 2 ticks); see {@link held/1}.</li>
%% <li>Catching up by state: a copy far behind a member (option `catch_up') takes the
%% member's state and joins it into its own key by key ({@link hm_ec_key:join/2}) instead of
%% applying the member's operations one by one; see {@link hm_ec_table_catch_up}. A state
%% of more keys than the option `part_keys' (default `infinity') goes in parts, joined one at
%% a time between the copy's other work, each part's keys read as it goes (option
%% `parts_late', default `true'; `false' reads every part at once, and sends snapshots
%% whole, for members of the previous release); see {@link hm_ec_table_stream}.</li>
%% <li>A bound on the log (option `log_limit'): past it, what the reachable members have
%% leaves the log, and a member that stayed unreachable catches up by state when it returns;
%% see {@link hm_ec_table_give_up}.</li>
%% <li>State transfer: a copy without state (new, or restarted without its disc state) is
%% `syncing': it refuses writes (it has no causal context: a delete would remove records it
%% never saw), asks members for a snapshot, installs the first one and delivers what arrived
%% meanwhile. A snapshot of more keys than `part_keys' comes in parts, written as they come
%% (see {@link hm_ec_table_transfer}). It starts from nothing only when every other member
%% says it holds nothing from anyone else (the members of a brand-new table).</li>
%% </ul>
%% CRDT tables write behind (the ChiaVe paper, *ChiaVe: A Flexible CRDT-Based Key-Value
%% Store*, §4: a store's state per broadcast epoch): a key's CRDT, once an update changed it
%% here (made here or a member's), stays in this state and its row is written when the epoch
%% ends (`crdt_epoch'), before a snapshot is sent, and, on a disc copy, before stable
%% operations leave the log. A row's write copies the whole CRDT into ETS and its read copies
%% it out, so writing every update made building a large value one update at a time cost
%% time quadratic in its size; held here, an update costs what the CRDT's own update costs.
%% The key is marked in the store meanwhile ({@link hm_ec_store:unwritten_put/2}), and
%% {@link read/2}, {@link rows/1} and {@link crdt_value/2} show it: a reader outside the
%% table's process asks the process for a marked key and reads an unmarked key's row. A disc
%% copy logs no prior state for a CRDT operation (it writes no row); its restart applies
%% every logged delivered operation again to what its rows lack (op: where the key's CRDT
%% has not delivered its dot; lattice flavors: joins, idempotent) and its unsent updates.
%%
%% Per key the state is {@link hm_ec_key}'s; the table holds what reads show, and the metadata
%% store only the keys storage alone cannot represent, so a quiescent table carries none. A
%% `prwset' clear is kept until stable so that it beats concurrent writes that arrive later,
%% on keys not there when it was applied.
%%
%% Invariants: every operation is applied once, in causal order; what reads show for a key
%% is `hm_ec_key:view/3' of its state; stabilization never changes what reads show; a
%% `disc_copies' copy logs every unstable operation and its delivered vector after applying
%% it, so a restart resumes from its state, as a new incarnation (the crash may have lost
%% its last operations, which members may have: the old incarnation's sequence numbers are
%% never used again); a disc copy acknowledges only what is on disc, so nothing a member
%% folded as stable can be missing from it after a crash. CRDT tables: reads of a copy show
%% every update it applied; a key's row lags its state by at most one epoch and is written
%% before anything leaves the copy that reads its rows (a snapshot); a key marked unwritten
%% has its state here; a disc copy's rows plus its logged operations hold every operation its
%% durable delivered vector counts (rows are written before the log forgets any).
-module(hm_ec_table).

-export([new/1, submit/5, submit_after/6, covers/2, handle/4, tick/2, acknowledge/2, nodeup/2,
         nodedown/2, set_members/2, timeout/2, stop/1, info/2]).
-export([conflicts/1, duplicates/1, tab/1, status/1, tcsb/1, store/1, clears/1, members/1,
         cookie/1]).
-export([read/2, rows/1, crdt_value/2, crdt_value_parts/2]).
-export([sync_timeout_ms/0, held/1, set_catch_up/2, set_parts_late/2]).
-export_type([state/0, effect/0, event/0, op/0, opts/0]).

-include("hm_ec_table.hrl").

-define(SYNC_TIMEOUT_MS, 30000).
-define(FULL_SCAN_TICKS, 240).
%% a member syncing asks for a snapshot at every tick; it is sent one at most this often
-define(SNAPSHOT_RETRY_TICKS, 8).

-type op() :: {write, tuple()} | delete | {delete_object, tuple()} | clear
            | {update, term()}.                 % a CRDT table's operation (hm_ec_crdt)
-type event() :: {applied, hm_tcsb:message()} | {installed, hm_vv:vv()}
               | {stabilized, [hm_vv:dot()]}.
-type effect() :: {send, node(), term()} | {reply, term(), term()}
                | {timer, pos_integer(), term()} | {continue, term()} | {drop, term()}
                | {info, string(), list()} | {event, event()}.
-type opts() :: #{tab := atom(), type := hm_ec_key:ec_type(), policy := hm_ec_key:policy(),
                  record := {atom(), pos_integer()}, cookie := term(), node := node(),
                  incarnation := term(), members := [node()], store := hm_ec_store:store(),
                  events => boolean(), tcsb => hm_tcsb:opts(),
                  crdt => none | hm_ec_crdt:spec(), epoch => pos_integer(),
                  flow => pos_integer() | infinity, catch_up => pos_integer() | infinity,
                  log_limit => pos_integer() | infinity, part_keys => pos_integer() | infinity,
                  parts_late => boolean(),
                  fold_keys => pos_integer() | infinity}.

-opaque state() :: #t{}.

%% @doc A table copy taken up, always as a new incarnation (option `incarnation'): with the
%% state restored from the durable log of a `disc_copies' store when it holds one (a restart:
%% its rows, delivered vector and unstable operations), otherwise empty and `syncing' from
%% the other members (or `ready' alone).
-spec new(opts()) -> {state(), [effect()]}.
new(O = #{tab := Tab, node := Node, members := Ms0, store := St}) ->
    Ms = lists:usort([Node | Ms0]),
    TOpts = maps:get(tcsb, O, #{}),
    T0 = #t{tab = Tab, type = maps:get(type, O), policy = maps:get(policy, O),
            record = maps:get(record, O), cookie = maps:get(cookie, O), store = St,
            disc = hm_ec_store:is_disc(St),
            tcsb_opts = TOpts, events = maps:get(events, O, false),
            crdt = maps:get(crdt, O, none), epoch = maps:get(epoch, O, 100),
            flow = maps:get(flow, O, ?FLOW_LIMIT),
            catch_up = maps:get(catch_up, O, infinity),
            log_limit = maps:get(log_limit, O, infinity),
            part_keys = maps:get(part_keys, O, infinity),
            parts_late = maps:get(parts_late, O, true),
            fold_keys = maps:get(fold_keys, O, infinity)},
    Log = hm_ec_store:log_read(St),
    case hm_ec_table_restore:restorable(Log) of
        {state, OldDelivered} ->
            Self = {Node, maps:get(incarnation, O)},
            hm_ec_table_restore:restore(OldDelivered, Log, Self, Ms, T0);
        Other ->
            B = hm_tcsb:new({Node, maps:get(incarnation, O)}, Ms, #{}, TOpts),
            Warn = [{info, "hypermnesia: ~p: the disc log is of format ~p, this release reads "
                     "~p: catching up from the other copies instead",
                     [Tab, V, hm_ec_wire:disc_version()]}
                    || {unsupported_format, V} <- [Other]],
            %% a log this release cannot read is dropped (a syncing copy's install clears it
            %% anyway; a copy alone keeps nothing of it)
            St1 = case Other of
                      {unsupported_format, _} -> hm_ec_store:log_clear(St);
                      none -> St
                  end,
            T1 = T0#t{tcsb = B, store = hm_ec_table_restore:with_format(St1)},
            case Ms -- [Node] of
                [] -> {T1, Warn};
                Others -> {T1#t{status = {syncing, [], []}},
                           Warn ++ [{send, N, {snapshot_req}} || N <- Others]}
            end
    end.

%% @doc A local operation on `Key' (async_ec or sync_ec), `Clock' this node's physical clock
%% in µs (for the hybrid logical clock of `lww'), `Up' the members reachable now. Answers
%% through a `{reply, From, ok | {error, Reason}}' effect: at once for `async', once every
%% reachable member applied it for `sync' (or {@link timeout/2} says it timed out).
-spec submit({term(), op()}, async | sync, term(), {integer(), [node()]}, state()) ->
          {state(), [effect()]}.
submit(_, _, From, _, T = #t{status = {syncing, _, _}, tab = Tab}) ->
    {T, [{reply, From, {error, {syncing, Tab}}}]};
submit(KeyOp, Mode, From, Env, T) ->
    hm_ec_table_write_behind:epoch_timer(submit1(KeyOp, Mode, From, Env, T)).

submit1({Key, Op}, Mode, From, Env, T = #t{crdt = Spec, tcsb = B, tab = Tab}) ->
    %% a CRDT table takes `{update, CrdtOp}' only (prepared here against the key's state),
    %% a table of records everything else
    case {Spec, Op} of
        {none, {update, _}} -> {T, [{reply, From, {error, {not_crdt_table, Tab}}}]};
        {none, {crdt, _}} -> {T, [{reply, From, {error, {not_crdt_table, Tab}}}]};
        {none, _} -> submit_op({Key, Op}, Mode, From, Env, T);
        {{_, Flavor}, {update, CrdtOp}} ->
            C0 = hm_ec_table_write_behind:crdt_state(Key, T),
            case hm_ec_crdt:prepare(CrdtOp, hm_tcsb:self(B), Spec, C0) of
                {ok, Payload, C1} when Flavor =/= op, Mode =:= async ->
                    hm_ec_table_write_behind:batch(Key, Payload, C1, From, T);
                {ok, Payload, _} -> submit_op({Key, {crdt, Payload}}, Mode, From, Env, T);
                {error, _} = E -> {T, [{reply, From, E}]}
            end;
        {_, _} -> {T, [{reply, From, {error, {crdt_table, Tab}}}]}
    end.

submit_op({Key, Op0}, Mode, From, {Clock, Up}, T = #t{tcsb = B, hlc = H0}) ->
    {Op, H1} = stamp(prepare(Key, Op0, T), H0, Clock, ?NODE_OF(B)),
    {Msg = {Self, Ts, _}, Out, B1} = hm_tcsb:broadcast({Mode, Key, Op}, B),
    {T0, Evs} = hm_ec_table_apply:apply_op(T#t{tcsb = B1, hlc = H1}, Msg, hm_tcsb:delivered(B1)),
    %% a sync write on a disc copy is on disc before any member hears of it (and before it
    %% returns): a crash then cannot take it back
    T1 = case Mode of
             sync -> hm_ec_table_apply:sync_store(T0);
             async -> T0
         end,
    Sends = [{send, N, M} || {N, M} <- Out],
    Reachable = case Mode of
                    sync -> [N || {N, _} <- Out, lists:member(N, Up)];
                    async -> []
                end,
    case {Mode, Reachable} of
        {sync, [_ | _]} ->
            Dot = {Self, maps:get(Self, Ts)},
            W = T1#t.waiters,
            {T1#t{waiters = W#{Dot => {From, Reachable}}},
             Evs ++ Sends ++ [{timer, ?SYNC_TIMEOUT_MS, {sync_timeout, Dot}}]};
        {async, _} when From =/= crdt_epoch ->
            Seq = maps:get(Self, Ts),
            case hm_ec_table_flow:flow_check(Up, Seq, T1) of
                {T2 = #t{held = Held, ticks = N}, true} ->
                    {T2#t{held = [{From, {Self, Seq}, N} | Held]}, Evs ++ Sends};
                {T2 = #t{held = []}, false} when Evs =:= [] ->
                    %% the common case: nothing held, no event (5 reductions of a local
                    %% write's 110 on the table core alone)
                    {T2, Sends ++ [{reply, From, ok}]};
                {T2, false} ->
                    {T3, Released} = hm_ec_table_flow:release_held(all, T2),
                    {T3, Evs ++ Sends ++ Released ++ [{reply, From, ok}]}
            end;
        _ ->
            {T1, Evs ++ Sends ++ [{reply, From, ok}]}
    end.

%% @doc {@link submit/5} for a write that a node without a ready copy of its own passes to
%% this copy, `After' the dots of the writes that node passed on before (its session, kept
%% by {@link hm_ec_hints}). This copy takes the write only once it has delivered every dot
%% of `After' (or the dot's incarnation is gone: {@link covers/2}), so that the write is
%% causally after every earlier one of that node, wherever each was applied: the session
%% guarantee Monotonic Writes (*Session Guarantees for Weakly Consistent Replicated
%% Data*, §2). A copy behind answers `{error, {behind, Tab}}' at once, and the node tries
%% another holder or keeps the write as a hint. A write taken answers `{ok, Dot}' instead
%% of `ok' (`{ok, none}' for an update that waits in a CRDT epoch, which has no dot yet):
%% the node adds `Dot' to its session.
-spec submit_after(hm_vv:vv(), {term(), op()}, async | sync, term(), {integer(), [node()]},
                   state()) -> {state(), [effect()]}.
submit_after(After, KeyOp, Mode, From, Env, T = #t{status = ready, tab = Tab, tcsb = B}) ->
    case covers(After, T) of
        false -> {T, [{reply, From, {error, {behind, Tab}}}]};
        true ->
            {T1, Effs} = submit(KeyOp, Mode, {with_dot, From}, Env, T),
            Self = hm_tcsb:self(B),
            Seq = hm_vv:get(Self, hm_tcsb:delivered(T1#t.tcsb)),
            Dot = case Seq > hm_vv:get(Self, hm_tcsb:delivered(B)) of
                      true -> {Self, Seq};
                      false -> none
                  end,
            {T1, [case E of
                      {reply, {with_dot, _} = C, R} -> hm_ec_table_flow:reply(C, Dot, R);
                      _ -> E
                  end || E <- Effs]}
    end;
submit_after(_After, KeyOp, Mode, From, Env, T) ->
    submit(KeyOp, Mode, From, Env, T).

%% @doc Whether this copy has delivered every dot of `After', a dot of a gone incarnation
%% (its node restarted without its state, or left the copy holders) counting as delivered:
%% what such an incarnation had not sent before it went is lost with it, and a session
%% waiting for it would wait for ever.
-spec covers(hm_vv:vv(), state()) -> boolean().
covers(After, #t{tcsb = B}) ->
    D = hm_tcsb:delivered(B),
    maps:fold(fun(O, Seq, Ok) -> Ok andalso (hm_vv:get(O, D) >= Seq orelse
                                              hm_tcsb:superseded(O, B))
              end, true, After).

%% The epoch ended: its updates leave as one operation, in the order they were made.
flush(T = #t{batch = []}) -> {T, []};
flush(T = #t{batch = Bt, crdt = Spec, store = St}) ->
    %% state: the last state of each key; delta: each key's deltas as one interval
    Pairs = hm_ec_crdt:epoch_payloads(Spec, lists:reverse(Bt)),
    {T1 = #t{store = St1}, Effs} = submit_op({'$crdt_epoch', {crdt, {batch, Pairs}}}, async,
                                             crdt_epoch, {0, []}, T#t{batch = []}),
    %% forgotten once the operation carrying it is logged: a crash in between sends it twice,
    %% which joins absorb
    St2 = case hm_ec_store:is_disc(St) of
              true -> hm_ec_store:log_del(crdt_batch, St1);
              false -> St1
          end,
    {T1#t{store = St2}, [E || E <- Effs, E =/= {reply, crdt_epoch, ok}]}.

%% A `delete_object' of the record the key shows here is broadcast as a delete of the key as
%% this copy sees it (hm_ec_key:prepare/3).
prepare(Key, Op = {delete_object, _}, T = #t{policy = Policy}) ->
    hm_ec_key:prepare(Policy, Op, read(Key, T));
prepare(_, Op, _) -> Op.

%% Hybrid logical clock for lww: the wall clock, never behind what was seen.
stamp({write, Rec}, H, Clock, Node) ->
    H1 = max(Clock, H + 1),
    {{write, Rec, {H1, Node}}, H1};
stamp(Op, H, _, _) -> {Op, H}.

%% @doc A timer set by an effect went off: a `sync_ec' caller stops waiting.
-spec timeout(term(), state()) -> {state(), [effect()]}.
timeout({sync_timeout, Dot}, T = #t{waiters = W}) ->
    case W of
        #{Dot := {From, Nodes}} ->
            {T#t{waiters = maps:remove(Dot, W)},
             [hm_ec_table_flow:reply(From, Dot, {error, {sync_timeout, Nodes}})]};
        _ -> {T, []}
    end;
timeout(crdt_epoch, T = #t{status = ready}) ->
    %% the epoch's updates leave, and the rows of the keys it changed are written
    {T1, Effs} = flush(T),
    {hm_ec_table_write_behind:write_unwritten(T1#t{epoch_set = false}), Effs};
timeout(crdt_epoch, T = #t{epoch = Ms}) -> {T, [{timer, Ms, crdt_epoch}]};   % not caught up yet
timeout({join_part, Id}, T) ->
    hm_ec_table_stream:join_next(Id, T);
timeout(fold, T) ->
    hm_ec_table_stabilize:fold_next(T);
timeout(_, T) -> {T, []}.

%% @doc The copy here stops (its table or fragment leaves this node, or the application
%% stops): every `sync_ec' caller still waiting is answered as when its wait times out. Its
%% write is applied here and was sent, but is not known to be applied by every member.
-spec stop(state()) -> {state(), [effect()]}.
stop(T = #t{waiters = W}) ->
    {Tr, Released} = hm_ec_table_flow:release_held(all, T),
    lists:foldl(fun(Dot, {T0, Effs}) ->
                        {T1, More} = timeout({sync_timeout, Dot}, T0),
                        {T1, Effs ++ More}
                end, {Tr, Released}, lists:sort(maps:keys(W))).

%% @doc A message from `From' naming table instance `Cookie' (Mnesia's creation cookie):
%% one for another instance (the table deleted and created again under the same name), from
%% a node that is not a member, or of an unknown shape is dropped.
-spec handle(node(), term(), term(), state()) -> {state(), [effect()]}.
handle(From, Cookie, _Msg, T = #t{cookie = C, tab = Tab}) when Cookie =/= C ->
    {T, [{drop, {other_table_instance, Tab, From}}]};
handle(From, _Cookie, Msg, T = #t{tcsb = B, tab = Tab}) ->
    case lists:member(From, hm_tcsb:members(B)) of
        true -> hm_ec_table_write_behind:epoch_timer(remote(From, Msg, T));
        false -> {T, [{drop, {not_a_member, From, Tab}}]}
    end.

remote(From, {ops, Msgs}, T = #t{status = ready}) when is_list(Msgs) ->
    hm_ec_table_receive:receive_ops(From, Msgs, T);
remote(From, {ops, Msgs}, T) when is_list(Msgs) ->
    %% not caught up yet: each kept for after the state transfer, as one `op'
    {T1, Effs} = lists:foldl(fun(M, {Tx, E}) ->
                                     case remote(From, {op, M}, Tx) of
                                         {Ty, []} -> {Ty, E};
                                         {Ty, E1} -> {Ty, [E1 | E]}
                                     end
                             end, {T, []}, Msgs),
    {T1, lists:append(lists:reverse(Effs))};
remote(From, {op, Msg}, T = #t{status = {syncing, Raw, Empty}, tab = Tab}) ->
    %% not caught up yet: keep it for after the state transfer; not while a snapshot in parts
    %% comes (for as long as it takes, under load, the operations would pile up here): the
    %% members send again what its last part does not hold once this copy acknowledges it,
    %% as after any message lost
    case hm_ec_table_transfer:is_receiving(T) of
        true -> {T, []};
        false ->
            case hm_ec_wire:is_op_message(Msg) of
                false -> {T, [{drop, {bad_op_message, Tab, From}}]};
                true -> {T#t{status = {syncing, [Msg | Raw], Empty}}, []}
            end
    end;
remote(From, {snapshot_req}, T = #t{status = ready, ahead = Ahead}) when Ahead =/= none ->
    %% keys joined ahead of what this copy has delivered (hm_ec_table_stream): a copy that
    %% installed them would hold their operations twice
    {T, [{send, From, {snapshot_none}}]};
remote(From, {snapshot_req}, T = #t{status = ready, ticks = N, snapshots_sent = Sent})
  when is_map_key(From, Sent), N - map_get(From, Sent) < ?SNAPSHOT_RETRY_TICKS ->
    %% one sent lately may still be on its way or being installed: a snapshot carries every
    %% operation not yet stable, after a long cut under load a million of them, and the
    %% member asks again at every tick until it has one
    {T, []};
remote(From, {snapshot_req}, T0 = #t{status = ready}) ->
    case hm_ec_table_transfer:answers(From, T0) of
        {true, T} -> snapshot_to(From, T);
        {false, T} -> {T, []}
    end;
remote(From, {snapshot_req}, T) ->
    snapshot_to(From, T);
remote(From, Msg = {snapshot, Snap}, T = #t{status = {syncing, _, _}, tab = Tab}) ->
    case hm_ec_wire:is_snapshot(Msg) of
        true when is_map_key(parts, Snap) -> hm_ec_table_transfer:begin_parts(From, Snap, T);
        true -> install(Snap, T);
        false -> {T, [{drop, {bad_message, Tab, From, Msg}}]}
    end;
remote(From, {snapshot_empty}, T = #t{status = {syncing, Raw, Empty}, tcsb = B}) ->
    %% only when every other member holds nothing may this one start from nothing too
    Empty1 = lists:usort([From | Empty]),
    case hm_tcsb:members(B) -- [?NODE_OF(B) | Empty1] of
        [] -> install(hm_ec_table_transfer:empty_snapshot(), T);
        _ -> {T#t{status = {syncing, Raw, Empty1}}, []}
    end;
remote(From, {snapshot, #{parts := {Id, _}}}, T = #t{status = ready}) ->
    {T, [{send, From, {merge_part_gone, Id}}]};  % already caught up: no more of it
remote(_From, {snapshot, _}, T = #t{status = ready}) ->
    {T, []};                                    % already caught up
remote(_From, {snapshot_empty}, T) ->
    {T, []};
remote(_From, {snapshot_none}, T) ->
    {T, []};                                    % that member cannot help yet
remote(From, Msg = {merge_req, V}, T0 = #t{tab = Tab}) ->
    case is_map(V) of
        false -> {T0, [{drop, {bad_message, Tab, From, Msg}}]};
        true ->
            %% what the member joins is on disc here first, as for a snapshot
            T = hm_ec_table_apply:sync_store(T0),
            {T1, Ask} = hm_ec_table_catch_up:merge_request_back(From, V, T),
            State = case hm_ec_table_give_up:sending_to(From, T) of
                        true -> {merge_none};
                        false -> hm_ec_table_catch_up:merge_state(T, V)
                    end,
            N = case State of
                    {merge, #{rows := {left_out, _, _}}} -> T1#t.partial_states + 1;
                    _ -> T1#t.partial_states
                end,
            To = [From | hm_ec_table_catch_up:also_behind(From, State, T)],
            {T2, Sends} = hm_ec_table_stream:send_state(To, State, T1#t{partial_states = N}),
            {case State of
                 {merge, _} -> hm_ec_table_give_up:sent_state(To, T2);
                 {merge_none} -> T2
             end, Ask ++ Sends}
    end;
remote(From, Msg = {merge, _}, T0 = #t{tab = Tab, merge_req = Req}) ->
    case hm_ec_wire:is_merge(Msg) of
        false -> {T0#t{merge_req = none}, [{drop, {bad_message, Tab, From, Msg}}]};
        true ->
            {T, Effs} = case Req of
                            {From, AskedAt} ->
                                hm_ec_table_catch_up:merge_asked(From, AskedAt, Msg,
                                                                 T0#t{merge_req = none});
                            _ -> hm_ec_table_catch_up:merge_unasked(From, Msg, T0)
                        end,
            {T, Effs ++ hm_ec_table_stream:not_taken(From, Msg, T)}
    end;
remote(_From, {merge_none}, T) ->
    {T#t{merge_req = none}, []};
remote(From, {merge_part, Id, I, Bin}, T = #t{status = {syncing, _, _}}) when is_integer(I) ->
    case hm_ec_table_transfer:part(From, {Id, I, Bin}, T) of
        {installed, T1, Effs, Pending} -> deliver_pending(T1, Effs, Pending);
        Stepped -> Stepped
    end;
remote(From, {merge_part, Id, I, Bin}, T) when is_integer(I) ->
    hm_ec_table_stream:part(From, {Id, I, Bin}, T);
remote(From, {merge_part_ack, Id, I}, T) when is_integer(I), I >= 1 ->
    hm_ec_table_stream:acked(From, Id, I, T);
remote(From, {merge_part_gone, Id}, T = #t{status = {syncing, _, _}}) ->
    {T1, Effs} = hm_ec_table_stream:gone(From, Id, T),     % one it was sending
    {T2, Effs2} = hm_ec_table_transfer:gone(From, Id, T1),
    {T2, Effs ++ Effs2};
remote(From, {merge_part_gone, Id}, T) ->
    hm_ec_table_stream:gone(From, Id, T);
remote(From, {op, Msg}, T) ->
    hm_ec_table_receive:receive_ops(From, [Msg], T);
remote(From, Ack = {ack, Replica, V, Newest}, T = #t{tcsb = B, tab = Tab}) ->
    case hm_ec_wire:is_ack(Ack) of
        true ->
            {T1, Effs} = hm_ec_table_flow:flow_release(hm_ec_table_flow:flow_changed(
                                        T#t{tcsb = hm_tcsb:receive_ack(Replica, V, Newest, B)})),
            {T2, Ask} = hm_ec_table_catch_up:merge_request_now(From, T1),
            {T2, Effs ++ Ask};
        false -> {T, [{drop, {bad_message, Tab, From, Ack}}]}
    end;
remote(From, {applied, Dot}, T = #t{waiters = W}) ->
    case W of
        #{Dot := {Caller, Nodes}} ->
            case lists:delete(From, Nodes) of
                [] -> {T#t{waiters = maps:remove(Dot, W)},
                       [hm_ec_table_flow:reply(Caller, Dot, ok)]};
                Rest -> {T#t{waiters = W#{Dot := {Caller, Rest}}}, []}
            end;
        _ -> {T, []}
    end;
remote(From, Other, T = #t{tab = Tab}) ->
    {T, [{drop, {bad_message, Tab, From, Other}}]}.

%% Install a member's state (hm_ec_table_transfer), then deliver what arrived meanwhile.
install(Snap, T) ->
    {T1, Effs, Pending} = hm_ec_table_transfer:install(Snap, T),
    deliver_pending(T1, Effs, Pending).

deliver_pending(T1 = #t{tcsb = B}, Effs, Pending) ->
    lists:foldl(fun(M, {Tx, E}) -> {Ty, E1} = remote(?NODE_OF(B), {op, M}, Tx), {Ty, E ++ E1} end,
                {T1, Effs}, Pending).

%% This copy's snapshot to member `From' (or, while syncing, what it holds of one).
snapshot_to(From, T0 = #t{ticks = N, snapshots_sent = Sent}) ->
    %% a state or delta CRDT table's updates waiting for the epoch's end leave now: the
    %% snapshot shows them, and they must be in the broadcast (its log travels with the
    %% snapshot) or a copy that installs it would hold updates no other copy will receive
    {T1, Flushed} = case T0 of
                        #t{status = ready} -> flush(T0#t{snapshots_sent = Sent#{From => N}});
                        _ -> {T0, []}
                    end,
    %% what a member installs is every row as reads here show it, on disc here first (see
    %% tick/2)
    T = hm_ec_table_apply:sync_store(hm_ec_table_write_behind:write_unwritten(T1)),
    case hm_ec_table_transfer:snapshot_keys(T) of
        {parts, Keys} ->
            {T2, Sends} = hm_ec_table_stream:send_snapshot(From, Keys, T),
            {T2, Flushed ++ Sends};
        whole -> {T, Flushed ++ [{send, From, hm_ec_table_transfer:snapshot(T)}]}
    end.

%% @doc Member `N' is reachable again, maybe as a new incarnation without its state: forget
%% what it was known to have; retransmission to it resumes from its next acknowledgement.
-spec nodeup(node(), state()) -> {state(), [effect()]}.
nodeup(N, T = #t{tcsb = B}) ->
    {hm_ec_table_flow:flow_changed(T#t{tcsb = hm_tcsb:forget_member(N, B)}), []}.

%% @doc Member `N' is unreachable: `sync_ec' callers no longer wait for it, and what it had is
%% relearned from its next acknowledgement (it may come back without its state).
-spec nodedown(node(), state()) -> {state(), [effect()]}.
nodedown(N, T = #t{tcsb = B, waiters = W}) ->
    {W1, Replies} = maps:fold(fun(Dot, {Caller, Nodes}, {Acc, R}) ->
                                      case lists:delete(N, Nodes) of
                                          [] -> {Acc,
                                                 [hm_ec_table_flow:reply(Caller, Dot, ok) | R]};
                                          Rest -> {Acc#{Dot => {Caller, Rest}}, R}
                                      end
                              end, {#{}, []}, W),
    T1a = hm_ec_table_flow:flow_changed(T#t{tcsb = hm_tcsb:forget_member(N, B), waiters = W1,
                                            up = lists:delete(N, T#t.up)}),
    {T1, Released} = hm_ec_table_flow:flow_release(T1a),
    {T1, Replies ++ Released}.

%% @doc The table's copy holders changed: a removed member no longer holds stability back.
-spec set_members([node()], state()) -> state().
set_members(Ms, T = #t{tcsb = B, acks_sent = Sent}) ->
    B1 = hm_tcsb:set_members(Ms, B),
    %% what was last acknowledged to a node that is no longer a member is forgotten (a
    %% member that comes back hears its next acknowledgement at once)
    hm_ec_table_flow:flow_changed(T#t{tcsb = B1, acks_sent = maps:with(hm_tcsb:members(B1), Sent)}).

%% @doc The periodic step (every 250 ms at run time): acknowledgements and retransmission
%% to the reachable members `Up', a snapshot request while syncing, stabilization.
-spec tick([node()], state()) -> {state(), [effect()]}.
tick(Up0, Tx = #t{tcsb = B0}) ->
    Up = Up0 -- [?NODE_OF(B0)],
    %% a disc copy acknowledges only what is on disc: a member folds what every member
    %% acknowledged as stable and forgets it, so an operation this copy lost in a crash
    %% could come back from nobody
    T0 = hm_ec_table_apply:sync_store(Tx),
    {Acks, T = #t{ticks = N}} = acks_due(Up, T0, tick),
    Reach = [M || M <- hm_tcsb:members(B0), lists:member(M, Up)],
    {Resends, B} = lists:foldl(fun(M, {Acc, Bx}) ->
                                       {Msgs, By} = hm_tcsb:resend_due(M, Bx),
                                       {[{send, M, {ops, Msgs}} || Msgs =/= []] ++ Acc, By}
                               end, {[], B0}, Reach),
    %% (none while a snapshot in parts comes)
    Snap = [{send, M, {snapshot_req}} || syncing(T), not hm_ec_table_transfer:is_receiving(T),
                                         M <- Reach],
    {Tm0, Merge} = hm_ec_table_catch_up:merge_request(Reach, T#t{tcsb = B}),
    %% the bound on the log, and the states of members that lack what left it
    {Tm1, Pushed} = hm_ec_table_give_up:push_states(Reach, hm_ec_table_give_up:give_up(Tm0)),
    %% states in parts: what stalled is asked for again, what was abandoned forgotten
    {Tm2, Parts0} = hm_ec_table_stream:tick(Tm1),
    {Tm, Parts1} = hm_ec_table_transfer:tick(Tm2),
    Parts = Parts0 ++ Parts1,
    %% every ?FULL_SCAN_TICKS ticks every key is looked at, as a safety net
    {T1, Evs} = hm_ec_table_stabilize:stabilize(Tm, N rem ?FULL_SCAN_TICKS =:= 0),
    {T2, Replies} = release_waiters(Up, T1),
    %% what is still held after that goes once held ?FLOW_HOLD_TICKS ticks
    {T3, Released} = hm_ec_table_flow:flow_release(T2#t{up = Up}),
    {T4, Old} = hm_ec_table_flow:release_held(old, T3),
    {hm_ec_table_flow:flow_changed(T4#t{tcsb = hm_tcsb:tick(T4#t.tcsb), ticks = N + 1}),
     Acks ++ lists:reverse(Resends) ++ Snap ++ Merge ++ Pushed ++ Parts ++ Evs ++ Replies
     ++ Released
     ++ Old}.

%% @doc The stability step, run between ticks while the table is busy (every few ms at run
%% time): acknowledgements that say something new to the reachable members `Up', and
%% stabilization of what became stable. Under load an operation then leaves the log, and
%% its key its timestamps, within a few of these steps of its last member delivering it, not
%% within two ticks: the log and the metadata a busy table holds stay small, and flow
%% control (hm_ec_table_flow:flow/1) learns soon how far behind each member is. A `disc_copies' copy
%% syncs its store first: it acknowledges only what is on disc.
-spec acknowledge([node()], state()) -> {state(), [effect()]}.
acknowledge(_Up, T = #t{status = {syncing, _, _}}) -> {T, []};
acknowledge(Up, T0 = #t{tcsb = B}) ->
    {Acks, T} = acks_due(Up -- [?NODE_OF(B)], hm_ec_table_apply:sync_store(T0), new),
    {T1, Evs} = hm_ec_table_stabilize:stabilize(T, false),
    {T1, Acks ++ Evs}.

%% A sync_ec caller stops waiting for a member that acknowledged the write (its `applied'
%% answer was lost: it goes once, without waiting for room on a busy connection), that is no
%% longer reachable (a nodedown this copy missed), or whose copy has not acknowledged for
%% ?HEARD_TICKS ticks (a running copy acknowledges at least every ?ACK_EVERY: this one is
%% restarting, or its node's Mnesia has not loaded the table yet, and what is sent to it is
%% lost; one not heard from since this copy started is still waited for). Otherwise a
%% caller could wait the whole 30 s timeout for a write on the side of a restarted disc copy
%% whose table Mnesia could not load while cut off.
release_waiters(_Up, T = #t{waiters = W}) when map_size(W) =:= 0 -> {T, []};
release_waiters(Up, T = #t{waiters = W, tcsb = B}) ->
    {W1, Replies} =
        maps:fold(fun(Dot, {Caller, Nodes}, {Acc, R}) ->
                          case [N || N <- Nodes, lists:member(N, Up),
                                     not hm_tcsb:silent(N, ?HEARD_TICKS, B),
                                     not hm_vv:contains(Dot, hm_tcsb:reported(N, B))] of
                              [] -> {Acc, [hm_ec_table_flow:reply(Caller, Dot, ok) | R]};
                              Rest -> {Acc#{Dot => {Caller, Rest}}, R}
                          end
                  end, {#{}, []}, W),
    {T#t{waiters = W1}, lists:reverse(Replies)}.

syncing(#t{status = {syncing, _, _}}) -> true;
syncing(_) -> false.

%% An acknowledgement goes to a member when it says something new there (what this copy
%% delivered, or the incarnations it heard of, changed since the last one sent), and at least
%% every ?ACK_EVERY ticks otherwise: an idle table costs no message per tick, and a member
%% whose acknowledgement was lost hears it again (its retransmissions stop) within 2 s.
%% `When': `tick', or `new' for only those that say something new (the stability step
%% between ticks).
acks_due(Up, T = #t{acks_sent = Sent, ticks = N, tcsb = B}, When) ->
    Due = [{M, Ack} || {M, Ack} <- hm_tcsb:acks(B), lists:member(M, Up),
                       case maps:get(M, Sent, none) of
                           {Ack, At} -> When =:= tick andalso N - At >= ?ACK_EVERY;
                           _ -> true
                       end],
    Sent1 = lists:foldl(fun({M, Ack}, Acc) -> Acc#{M => {Ack, N}} end, Sent, Due),
    {[{send, M, Ack} || {M, Ack} <- Due], T#t{acks_sent = Sent1}}.

%% @doc Whether this copy may catch up by state (see the option `catch_up' of {@link new/1}):
%% `infinity' turns it off, as for a table with a `disc_copies' copy.
-spec set_catch_up(pos_integer() | infinity, state()) -> state().
set_catch_up(Lag, T) -> T#t{catch_up = Lag}.

%% @doc Set whether the parts of a state sent in parts are read as each goes (option
%% `parts_late'), or all at once when the state is built.
-spec set_parts_late(boolean(), state()) -> state().
set_parts_late(Late, T) -> T#t{parts_late = Late}.

%% @doc How many answers to this copy's writers are held back (flow control: a member
%% lags on its operations).
-spec held(state()) -> non_neg_integer().
held(#t{held = Held}) -> length(Held).

%% @doc Status of this copy; `Up' the nodes reachable now.
-spec info([node()], state()) -> map().
info(Up, T = #t{tab = Tab, type = Type, policy = Policy, tcsb = B, waiters = W, store = St}) ->
    #{table => Tab, type => Type, conflict => Policy,
      status => case syncing(T) of true -> syncing; false -> ready end,
      members => hm_tcsb:members(B),
      reachable => [N || N <- hm_tcsb:members(B), N =:= ?NODE_OF(B) orelse lists:member(N, Up)],
      delivered => hm_tcsb:delivered(B),
      stable => hm_tcsb:stable(B),
      buffered_ops => hm_tcsb:pending(B),
      unstable_ops => hm_tcsb:log_size(B),
      unstable_keys => hm_ec_store:meta_size(St),
      metadata_words => hm_ec_store:meta_words(St),
      size => hm_ec_store:size(St),
      sync_waiting => map_size(W), crdt => T#t.crdt, unsent_updates => length(T#t.batch),
      unwritten_keys => map_size(T#t.unwritten),
      conflicts => T#t.conflicts, duplicates => T#t.duplicates,
      state_catch_ups => T#t.merges, partial_states => T#t.partial_states,
      given_up_keys => case T#t.given_up_keys of
                           all -> all;
                           Keys -> map_size(Keys)
                       end,
      keys_ahead => case T#t.ahead of
                        none -> 0;
                        {_, Ahead} -> map_size(Ahead)
                    end}.

%% @doc What reads show for `Key' on this copy: for a CRDT table, the key's updates its row
%% does not have yet included (`[{Name, Key, Crdt}]', or `[]').
-spec read(term(), state()) -> [tuple()].
read(Key, #t{unwritten = U, record = {Name, _}, store = St}) ->
    case U of
        #{Key := C} -> [{Name, Key, C}];
        _ -> hm_ec_store:read(Key, St)
    end.

%% @doc Every record reads show on this copy (see {@link read/2}).
-spec rows(state()) -> [tuple()].
rows(#t{unwritten = U, store = St}) when map_size(U) =:= 0 -> hm_ec_store:rows(St);
rows(#t{unwritten = U, record = {Name, _}, store = St}) ->
    [R || R <- hm_ec_store:rows(St), not is_map_key(element(2, R), U)]
        ++ [{Name, K, C} || {K, C} <- maps:to_list(U)].

%% @doc A CRDT table's value of `Key' on this copy, every update applied here included (the
%% type's empty value for a key never written).
-spec crdt_value(term(), state()) -> {ok, term()} | {error, {not_crdt_table, atom()}}.
crdt_value(_, #t{crdt = none, tab = Tab}) -> {error, {not_crdt_table, Tab}};
crdt_value(Key, T) -> {ok, hm_ec_crdt:value(hm_ec_table_write_behind:crdt_state(Key, T))}.

%% @doc {@link crdt_value/2} in two steps ({@link hm_crdt:value_parts/1}): what the table's
%% process answers a reader, who makes the value of it with {@link hm_crdt:finish_value/1}
%% (a set's sort is then the reader's, not the process's that every update waits for).
-spec crdt_value_parts(term(), state()) ->
          {ok, hm_crdt:value_parts()} | {error, {not_crdt_table, atom()}}.
crdt_value_parts(_, #t{crdt = none, tab = Tab}) -> {error, {not_crdt_table, Tab}};
crdt_value_parts(Key, T) -> {ok, hm_crdt:value_parts(hm_ec_table_write_behind:crdt_state(Key, T))}.

%% @doc How many operations this copy applied that met a concurrent one on their key (and
%% were resolved by the table's type and conflict policy).
-spec conflicts(state()) -> non_neg_integer().
conflicts(#t{conflicts = N}) -> N.

%% @doc How many members' operations this copy received again after it had applied them.
-spec duplicates(state()) -> non_neg_integer().
duplicates(#t{duplicates = N}) -> N.

-spec tab(state()) -> atom().
tab(#t{tab = Tab}) -> Tab.

-spec status(state()) -> ready | syncing.
status(#t{status = ready}) -> ready;
status(_) -> syncing.

-spec tcsb(state()) -> hm_tcsb:state().
tcsb(#t{tcsb = B}) -> B.

-spec store(state()) -> hm_ec_store:store().
store(#t{store = St}) -> St.

-spec clears(state()) -> list().
clears(#t{clears = Cs}) -> Cs.

-spec members(state()) -> [node()].
members(#t{tcsb = B}) -> hm_tcsb:members(B).

-spec cookie(state()) -> term().
cookie(#t{cookie = C}) -> C.

%% @doc How long a `sync_ec' write waits for the other copies before it is answered
%% `{sync_timeout, Nodes}' (every EC table, dotted fragments included).
-spec sync_timeout_ms() -> pos_integer().
sync_timeout_ms() -> ?SYNC_TIMEOUT_MS.
