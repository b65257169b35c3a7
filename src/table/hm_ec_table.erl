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
%% the number of unstable keys.</li>
%% <li>{@link acknowledge/2}: the acknowledgements and stabilization of a tick, run between
%% ticks while the table is busy, so that stability follows the load closely.</li>
%% <li>Flow control: the answer to an `async' write waits while a member that keeps up
%% lags on this copy's operations by more than the option `flow' (operations, default
%% 5,000) beyond the least it lagged by, and goes when its acknowledgements say it caught
%% up (or after 2 ticks); see {@link held/1}.</li>
%% <li>Catching up by state: a copy far behind a member (option `catch_up') takes the
%% member's state and joins it into its own key by key ({@link hm_ec_key:join/2}) instead of
%% applying the member's operations one by one; see `merge_request/2' in the source.</li>
%% <li>State transfer: a copy without state (new, or restarted without its disc state) is
%% `syncing': it refuses writes (it has no causal context: a delete would remove records it
%% never saw), asks members for a snapshot, installs the first one and delivers what arrived
%% meanwhile. It starts from nothing only when every other member says it holds nothing from
%% anyone else (the members of a brand-new table).</li>
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
-export([conflicts/1, duplicates/1, tab/1, status/1, tcsb/1, store/1, clears/1, members/1, cookie/1]).
-export([read/2, rows/1, crdt_value/2, crdt_value_parts/2]).
-export([sync_timeout_ms/0, work_batch/0, held/1, set_catch_up/2]).
-export_type([state/0, effect/0, event/0, op/0, opts/0]).

-define(SYNC_TIMEOUT_MS, 30000).
-define(ACK_EVERY, 8).
%% a member heard from within this many ticks runs (it acknowledges at least every
%% ?ACK_EVERY): a sync_ec caller stops waiting for one silent longer (release_waiters/2), and
%% a copy keeps counting how long it has lacked what one reported (merge_request/2)
-define(HEARD_TICKS, 2 * ?ACK_EVERY).
-define(FULL_SCAN_TICKS, 240).
%% flow control (see flow/1): how many of its own operations a copy lets a member fall
%% behind by, beyond the least it was behind since it was last heard from anew
-define(FLOW_LIMIT, 5000).
%% a member not acknowledging for this long is not waited for
-define(FLOW_SILENT_TICKS, 2).
%% an answer held back goes after this many ticks at most
-define(FLOW_HOLD_TICKS, 2).
%% catching up by state (merge_request/2): off unless the option `catch_up' says how many
%% operations behind a member a copy takes its state; asked again after this many ticks
%% without an answer
-define(MERGE_RETRY_TICKS, 8).
%% a member syncing asks for a snapshot at every tick; it is sent one at most this often
-define(SNAPSHOT_RETRY_TICKS, 8).
%% a copy still lacking after this many ticks what a member reported takes its state (the
%% member may be the only one left with those operations, and unable to relay them)
-define(STUCK_TICKS, 24).

-type op() :: {write, tuple()} | delete | {delete_object, tuple()} | clear
            | {update, term()}.                 % a CRDT table's operation (hm_ec_crdt)
-type event() :: {applied, hm_tcsb:message()} | {installed, hm_vv:vv()}
               | {stabilized, [hm_vv:dot()]}.
-type effect() :: {send, node(), term()} | {reply, term(), term()}
                | {timer, pos_integer(), term()} | {drop, term()}
                | {info, string(), list()} | {event, event()}.
-type opts() :: #{tab := atom(), type := hm_ec_key:ec_type(), policy := hm_ec_key:policy(),
                  record := {atom(), pos_integer()}, cookie := term(), node := node(),
                  incarnation := term(), members := [node()], store := hm_ec_store:store(),
                  events => boolean(), tcsb => hm_tcsb:opts(),
                  crdt => none | hm_ec_crdt:spec(), epoch => pos_integer(),
                  flow => pos_integer() | infinity, catch_up => pos_integer() | infinity}.

-record(t, {tab :: atom(),
            type :: hm_ec_key:ec_type(),
            policy :: hm_ec_key:policy(),
            record :: {atom(), pos_integer()},
            cookie :: term(),
            store :: hm_ec_store:store(),
            %% whether the store is a disc copy's (fixed for a store: asked once, not per
            %% operation)
            disc = false :: boolean(),
            tcsb :: hm_tcsb:state() | undefined,      % undefined only while new/1 builds it
            tcsb_opts = #{} :: hm_tcsb:opts(),
            status = ready :: ready | {syncing, [hm_tcsb:message()], [node()]},
            %% unstable prwset clears: {Dot, Ts, KeysWhereSettled}
            clears = [] :: [{hm_vv:dot(), hm_vv:vv(), #{term() => true}}],
            stable_seen :: hm_vv:vv() | undefined,
            %% sync_ec callers: Dot => {From, NodesStillToApply}
            waiters = #{} :: #{hm_vv:dot() => {term(), [node()]}},
            hlc = 0 :: integer(),
            %% per member: the last acknowledgement sent there, and the tick it was sent at
            acks_sent = #{} :: #{node() => {term(), non_neg_integer()}},
            %% operations applied that met a concurrent one on their key (policy resolved)
            conflicts = 0 :: non_neg_integer(),
            %% members' operations received here again after they were delivered
            duplicates = 0 :: non_neg_integer(),
            ticks = 0 :: non_neg_integer(),
            %% a disc copy: operations delivered since the store was last synced (its
            %% acknowledgements wait for that: see tick/2)
            unsynced = false :: boolean(),
            events = false :: boolean(),
            %% a CRDT table's type and flavor (hm_ec_crdt), `none' for a set of records
            crdt = none :: none | hm_ec_crdt:spec(),
            %% state and delta CRDT tables: the broadcast epoch (ms), and the updates applied
            %% here since the last one, newest first, sent as one message when it ends
            epoch = 100 :: pos_integer(),
            batch = [] :: [{term(), hm_ec_crdt:payload()}],
            %% CRDT tables, write-behind: the keys whose state here is newer than their row
            %% (marked in the store as such), written when the epoch ends
            unwritten = #{} :: #{term() => hm_crdt:crdt()},
            %% a `crdt_epoch' timer is set
            epoch_set = false :: boolean(),
            %% flow control (flow/1): the limit, per member the least it lagged on this
            %% copy's operations since it was last heard from anew, the answers held back
            %% (newest first: caller, dot, tick held at), the members reachable at the last
            %% write or tick
            flow = ?FLOW_LIMIT :: pos_integer() | infinity,
            flow_base = #{} :: #{node() => non_neg_integer()},
            %% what flow/1 last found, for as long as nothing but this copy's own writes
            %% changed since (flow_check/3): no member holds writers back while this copy's
            %% own sequence number is at most this (0: ask flow/1)
            flow_until = 0 :: non_neg_integer() | infinity,
            held = [] :: [{term(), hm_vv:dot(), non_neg_integer()}],
            up = [] :: [node()],
            %% catching up by state (merge_request/2): how far behind a member this copy
            %% must be, the member asked and the tick it was asked at, how many times it
            %% caught up so far
            catch_up = infinity :: pos_integer() | infinity,
            merge_req = none :: none | {node(), non_neg_integer()},
            behind = #{} :: #{node() => {non_neg_integer(), hm_vv:vv()}},
            %% the tick this copy last caught up by state at
            merged_at = none :: none | non_neg_integer(),
            %% what the states caught up with delivered (stabilize/2)
            fold_after = none :: none | hm_vv:vv(),
            %% the stable vectors folded so far, joined (and what a restored copy had
            %% delivered): every operation this copy forgot from its log is in it
            %% (merge_state/2)
            folded = #{} :: hm_vv:vv(),
            merges = 0 :: non_neg_integer(),
            %% states built for members that carried only the keys they may lack
            partial_states = 0 :: non_neg_integer(),
            %% per member: the tick this copy last sent it a snapshot
            snapshots_sent = #{} :: #{node() => non_neg_integer()}}).
-opaque state() :: #t{}.

%%% ================================================================ starting

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
            catch_up = maps:get(catch_up, O, infinity)},
    Log = hm_ec_store:log_read(St),
    case restorable(Log) of
        {state, {Old, Delivered}} ->
            %% a new incarnation with the restored state: the crash may have lost the last
            %% operations this copy made (Mnesia's log is written asynchronously), which
            %% members may have; as the old incarnation it would reuse their sequence numbers
            Self = {Node, next_incarnation(Old, maps:get(incarnation, O))},
            %% an operation logged without the state that counts it was cut short: it is
            %% not delivered here, and what it changed already is undone
            Logged = [M || {{Or, Seq}, M} <- Log, hm_vv:contains({Or, Seq}, Delivered)],
            {Clears, St0} = undo_cut(Log, Delivered,
                                     [C || {clears, Cs} <- Log, C <- Cs], St),
            B = hm_tcsb:restore_log(Logged, hm_tcsb:new(Self, Ms, Delivered, TOpts)),
            %% a state or delta CRDT table's updates applied but not sent before the restart
            Batch = [U || {crdt_batch, Us} <- Log, U <- Us],
            St1 = hm_ec_store:log_put(state, {Self, Delivered}, with_format(St0)),
            T1 = replay(Logged, lists:reverse(Batch),
                        T0#t{tcsb = B, clears = Clears, store = St1, batch = Batch,
                             epoch_set = Batch =/= [], folded = Delivered}),
            {T1, [{info, "hypermnesia: ~p restored from disc (~p unstable operations)",
                   [Tab, length(Logged)]}
                  | [{timer, T0#t.epoch, crdt_epoch} || Batch =/= []]]};
        Other ->
            B = hm_tcsb:new({Node, maps:get(incarnation, O)}, Ms, #{}, TOpts),
            Warn = [{info, "hypermnesia: ~p: the disc log is of format ~p, this release reads "
                     "~p: catching up from the other copies instead", [Tab, V, hm_ec_wire:disc_version()]}
                    || {unsupported_format, V} <- [Other]],
            %% a log this release cannot read is dropped (a syncing copy's install clears it
            %% anyway; a copy alone keeps nothing of it)
            St1 = case Other of
                      {unsupported_format, _} -> hm_ec_store:log_clear(St);
                      none -> St
                  end,
            T1 = T0#t{tcsb = B, store = with_format(St1)},
            case Ms -- [Node] of
                [] -> {T1, Warn};
                Others -> {T1#t{status = {syncing, [], []}},
                           Warn ++ [{send, N, {snapshot_req}} || N <- Others]}
            end
    end.

%% The replica's state in a disc log this release can read (a log written before the format
%% row existed has the same layout as format 1).
restorable(Log) ->
    Current = hm_ec_wire:disc_version(),
    case {lists:keyfind(format, 1, Log), lists:keyfind(state, 1, Log)} of
        {_, false} -> none;
        {{format, Current}, State} -> State;
        {false, State} -> State;
        {{format, V}, _} -> {unsupported_format, V}
    end.

with_format(St) -> hm_ec_store:log_put(format, hm_ec_wire:disc_version(), St).

%% The operation a crash cut short (its `undo' entry is logged before it changes storage, its
%% state after: see apply_op/3) leaves storage and the clears as they were before it.
undo_cut(Log, Delivered, Clears, St) ->
    case lists:keyfind(undo, 1, Log) of
        {undo, {Dot, Before, ClearsBefore}} ->
            case hm_vv:contains(Dot, Delivered) of
                true -> {Clears, St};
                false ->
                    St1 = lists:foldl(fun({K, Rows, Meta}, Acc) ->
                                              Acc1 = lists:foldl(fun hm_ec_store:write/2,
                                                                 hm_ec_store:delete(K, Acc),
                                                                 Rows),
                                              case Meta of
                                                  {ok, KS} -> hm_ec_store:meta_put(K, KS, Acc1);
                                                  none -> hm_ec_store:meta_del(K, Acc1)
                                              end
                                      end, St, Before),
                    St2 = case ClearsBefore of
                              Clears -> St1;
                              _ -> hm_ec_store:log_put(clears, ClearsBefore, St1)
                          end,
                    {ClearsBefore, hm_ec_store:log_del(undo, St2)}
            end;
        false -> {Clears, St}
    end.

%% A CRDT table's rows are written once per epoch (write-behind), so what a crash kept of
%% them may lack any suffix of each key's updates since: every delivered operation still
%% logged is applied again, in causal order (ordered by the sum of its vector timestamp, a
%% linear extension of causality), where its key's state lacks it (op flavor: the key's
%% CRDT has not delivered its dot; the lattice flavors join, which is idempotent), and the
%% updates made here but not sent are applied too (the next epoch sends them). Nothing a
%% row lacks is missing from the log: an operation leaves the log only once stable, and a
%% disc copy writes its rows before it forgets stable operations (stabilize/2).
replay(_, _, T = #t{crdt = none}) -> T;
replay(Logged, Unsent, T0 = #t{tcsb = B}) ->
    Order = fun({O, Ts, _}) -> {lists:sum(maps:values(Ts)), O} end,
    T1 = lists:foldl(fun({O, Ts, {_, Key, Op}}, Acc) ->
                             apply_key(Acc, O, Ts, Key, Op)
                     end, T0, lists:sort(fun(A, Bx) -> Order(A) =< Order(Bx) end, Logged)),
    %% the unsent updates, oldest first, as the origin applied them (batch/5)
    Self = hm_tcsb:self(B),
    T2 = lists:foldl(fun({Key, P}, Acc) ->
                             crdt_put(Key, hm_ec_crdt:effect(P, {Self, 1}, #{}, crdt_state(Key, Acc)),
                                      Acc)
                     end, T1, Unsent),
    write_unwritten(T2).

%% Incarnations grow with time (the server makes them from the clock); a clock set back
%% still gives a newer one.
next_incarnation({_, Old}, New) when is_integer(Old), is_integer(New), New =< Old -> Old + 1;
next_incarnation(_, New) -> New.

%%% ================================================================ local operations

%% @doc A local operation on `Key' (async_ec or sync_ec), `Clock' this node's physical clock
%% in µs (for the hybrid logical clock of `lww'), `Up' the members reachable now. Answers
%% through a `{reply, From, ok | {error, Reason}}' effect: at once for `async', once every
%% reachable member applied it for `sync' (or {@link timeout/2} says it timed out).
-spec submit({term(), op()}, async | sync, term(), {integer(), [node()]}, state()) ->
          {state(), [effect()]}.
submit(_, _, From, _, T = #t{status = {syncing, _, _}, tab = Tab}) ->
    {T, [{reply, From, {error, {syncing, Tab}}}]};
submit(KeyOp, Mode, From, Env, T) ->
    epoch_timer(submit1(KeyOp, Mode, From, Env, T)).

submit1({Key, Op}, Mode, From, Env, T = #t{crdt = Spec, tcsb = B, tab = Tab}) ->
    %% a CRDT table takes `{update, CrdtOp}' only (prepared here against the key's state),
    %% a table of records everything else
    case {Spec, Op} of
        {none, {update, _}} -> {T, [{reply, From, {error, {not_crdt_table, Tab}}}]};
        {none, {crdt, _}} -> {T, [{reply, From, {error, {not_crdt_table, Tab}}}]};
        {none, _} -> submit_op({Key, Op}, Mode, From, Env, T);
        {{_, Flavor}, {update, CrdtOp}} ->
            case hm_ec_crdt:prepare(CrdtOp, hm_tcsb:self(B), Spec, crdt_state(Key, T)) of
                {ok, Payload, C1} when Flavor =/= op, Mode =:= async ->
                    batch(Key, Payload, C1, From, T);
                {ok, Payload, _} -> submit_op({Key, {crdt, Payload}}, Mode, From, Env, T);
                {error, _} = E -> {T, [{reply, From, E}]}
            end;
        {_, _} -> {T, [{reply, From, {error, {crdt_table, Tab}}}]}
    end.

submit_op({Key, Op0}, Mode, From, {Clock, Up}, T = #t{tcsb = B, hlc = H0}) ->
    {Op, H1} = stamp(prepare(Key, Op0, T), H0, Clock, node_of(B)),
    {Msg = {Self, Ts, _}, Out, B1} = hm_tcsb:broadcast({Mode, Key, Op}, B),
    {T0, Evs} = apply_op(T#t{tcsb = B1, hlc = H1}, Msg, hm_tcsb:delivered(B1)),
    %% a sync write on a disc copy is on disc before any member hears of it (and before it
    %% returns): a crash then cannot take it back
    T1 = case Mode of
             sync -> sync_store(T0);
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
            case flow_check(Up, Seq, T1) of
                {T2 = #t{held = Held, ticks = N}, true} ->
                    {T2#t{held = [{From, {Self, Seq}, N} | Held]}, Evs ++ Sends};
                {T2 = #t{held = []}, false} when Evs =:= [] ->
                    %% the common case: nothing held, no event (5 reductions of a local
                    %% write's 110 on the table core alone)
                    {T2, Sends ++ [{reply, From, ok}]};
                {T2, false} ->
                    {T3, Released} = release_held(all, T2),
                    {T3, Evs ++ Sends ++ Released ++ [{reply, From, ok}]}
            end;
        _ ->
            {T1, Evs ++ Sends ++ [{reply, From, ok}]}
    end.

%% Flow control between members (as RabbitMQ's credit flow between processes): a copy
%% whose writers outrun a member, which falls ever further behind on their operations
%% (bench/REPORT.md: its queue grew to tens of thousands of operations while the others ran
%% on), holds back the answer to its writers' `async' writes, already applied and sent,
%% while a member lags on its operations by more than `flow' (default ?FLOW_LIMIT) beyond
%% the least it lagged since it was last heard from anew. The log, the metadata of unstable
%% keys and the member's queue stay bounded, and so does the time to stability. Only a
%% member reachable, acknowledging (within ?FLOW_SILENT_TICKS ticks) and caught up is
%% waited for: one cut off, silent or not heard from since it came back is not, so writes
%% stay available in a partition. Nor is any member while one heard from anew is more than
%% `flow' behind (back from a partition, or restarted), until it is within `flow' once:
%% after a partition every copy applies the other side's backlog, and the operations made
%% meanwhile come after it; waiting for them stopped writers on both sides until every
%% copy had applied it (run quick-20261124-0605). An answer is held for ?FLOW_HOLD_TICKS
%% ticks at most. Returns the state with the members' baselines updated, and whether a
%% member holds writers back.
%%
%% Its inputs other than this copy's own writes (members' acknowledgements, ticks, the
%% members reachable, members coming and going) change far less often than a copy writes,
%% so flow/1 also says up to which of its own sequence numbers its answer `false' holds
%% (`flow_until'), and flow_check/3 asks it again only past that or once an input changed
%% (flow_changed/1).
flow(T = #t{flow = infinity}) -> {T#t{flow_until = infinity}, false};
flow(T = #t{flow = Limit, flow_base = Base0, up = Up, tcsb = B}) ->
    Self = node_of(B),
    Own = own_seq(B),
    {Base, Blocked, CatchingUp, Until} =
        lists:foldl(fun(M, Acc) when M =:= Self -> Acc;
                       (M, {Bs, Bl, C, U}) ->
                            case lists:member(M, Up) andalso
                                hm_tcsb:acked_within(M, ?FLOW_SILENT_TICKS, B) andalso
                                hm_tcsb:lag(M, B) of
                                Lag when is_integer(Lag) ->
                                    %% M holds writers back once this copy's own
                                    %% sequence number passes Own - Lag + Least + Limit
                                    case Bs of
                                        #{M := Least} when Least =< Lag ->
                                            {Bs, Bl orelse Lag > Least + Limit, C,
                                             min(U, Own - Lag + Least + Limit)};
                                        #{M := _} -> {Bs#{M := Lag}, Bl, C, min(U, Own + Limit)};
                                        _ when Lag =< Limit ->
                                            {Bs#{M => Lag}, Bl, C, min(U, Own + Limit)};
                                        _ -> {Bs, Bl, true, U}
                                    end;
                                _ -> {maps:remove(M, Bs), Bl, C, U}
                            end
                    end, {Base0, false, false, infinity}, hm_tcsb:members(B)),
    Holds = Blocked andalso not CatchingUp,
    {T#t{flow_base = Base, flow_until = if Holds -> 0; CatchingUp -> infinity; true -> Until end},
     Holds}.

%% flow/1 for a write, `Seq' its sequence number, `Up' the members reachable now: its last
%% answer while it holds.
flow_check(Up, Seq, T = #t{up = Up, flow_until = Until}) when Until =/= 0, Seq =< Until ->
    {T, false};
flow_check(Up, _Seq, T) -> flow(T#t{up = Up}).

%% Something flow/1 reads other than this copy's own writes changed.
flow_changed(T) -> T#t{flow_until = 0}.

own_seq(B) -> hm_vv:get(hm_tcsb:self(B), hm_tcsb:delivered(B)).

%% The answers held back that may go: `all', or those held ?FLOW_HOLD_TICKS ticks (`old').
release_held(_, T = #t{held = []}) -> {T, []};
release_held(all, T = #t{held = Held}) ->
    {T#t{held = []}, [reply(From, Dot, ok) || {From, Dot, _} <- lists:reverse(Held)]};
release_held(old, T = #t{held = Held, ticks = N}) ->
    {Go, Stay} = lists:partition(fun({_, _, At}) -> N - At >= ?FLOW_HOLD_TICKS end, Held),
    {T#t{held = Stay}, [reply(From, Dot, ok) || {From, Dot, _} <- lists:reverse(Go)]}.

%% After what may let a member catch up (its acknowledgement, a tick, a node down): the
%% answers held back go when no member holds writers back any more.
flow_release(T = #t{held = []}) -> {T, []};
flow_release(T0) ->
    case flow(T0) of
        {T, false} -> release_held(all, T);
        {T, true} -> {T, []}
    end.

%% @doc How many answers to this copy's writers are held back (flow control: a member
%% lags on its operations).
-spec held(state()) -> non_neg_integer().
held(#t{held = Held}) -> length(Held).

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
                      {reply, {with_dot, _} = C, R} -> reply(C, Dot, R);
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

%% The answer to a caller: one of submit_after/6 learns the dot of its write.
reply({with_dot, From}, Dot, ok) -> {reply, From, {ok, Dot}};
reply({with_dot, From}, _Dot, R) -> {reply, From, R};
reply(From, _Dot, R) -> {reply, From, R}.

%% A state or delta CRDT table (ChiaVe's broadcast epoch): the update is applied here at
%% once, and the updates of an epoch leave together, as one message of the table's
%% broadcast, when it ends (for `state', only the last state of each key). A disc copy
%% logs them until then, so a restart sends them, and applies them here again (replay/3).
batch(Key, Payload, C1, From, T = #t{batch = Bt, store = St}) ->
    Bt1 = [{Key, Payload} | Bt],
    St1 = case hm_ec_store:is_disc(St) of
              true -> hm_ec_store:log_put(crdt_batch, Bt1, St);
              false -> St
          end,
    {crdt_put(Key, C1, T#t{batch = Bt1, store = St1}), [{reply, From, ok}]}.

%% A CRDT table's epoch timer is set while it has updates to send or rows to write.
epoch_timer({T = #t{epoch_set = false, batch = Bt, unwritten = U, epoch = Ms}, Effs})
  when Bt =/= []; map_size(U) > 0 ->
    {T#t{epoch_set = true}, Effs ++ [{timer, Ms, crdt_epoch}]};
epoch_timer(Result) -> Result.

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

node_of(B) -> element(1, hm_tcsb:self(B)).

%% @doc A timer set by an effect went off: a `sync_ec' caller stops waiting.
-spec timeout(term(), state()) -> {state(), [effect()]}.
timeout({sync_timeout, Dot}, T = #t{waiters = W}) ->
    case W of
        #{Dot := {From, Nodes}} ->
            {T#t{waiters = maps:remove(Dot, W)},
             [reply(From, Dot, {error, {sync_timeout, Nodes}})]};
        _ -> {T, []}
    end;
timeout(crdt_epoch, T = #t{status = ready}) ->
    %% the epoch's updates leave, and the rows of the keys it changed are written
    {T1, Effs} = flush(T),
    {write_unwritten(T1#t{epoch_set = false}), Effs};
timeout(crdt_epoch, T = #t{epoch = Ms}) -> {T, [{timer, Ms, crdt_epoch}]};   % not caught up yet
timeout(_, T) -> {T, []}.

%% @doc The copy here stops (its table or fragment leaves this node, or the application
%% stops): every `sync_ec' caller still waiting is answered as when its wait times out. Its
%% write is applied here and was sent, but is not known to be applied by every member.
-spec stop(state()) -> {state(), [effect()]}.
stop(T = #t{waiters = W}) ->
    {Tr, Released} = release_held(all, T),
    lists:foldl(fun(Dot, {T0, Effs}) ->
                        {T1, More} = timeout({sync_timeout, Dot}, T0),
                        {T1, Effs ++ More}
                end, {Tr, Released}, lists:sort(maps:keys(W))).

%%% ================================================================ members' messages

%% @doc A message from `From' naming table instance `Cookie' (Mnesia's creation cookie):
%% one for another instance (the table deleted and created again under the same name), from
%% a node that is not a member, or of an unknown shape is dropped.
-spec handle(node(), term(), term(), state()) -> {state(), [effect()]}.
handle(From, Cookie, _Msg, T = #t{cookie = C, tab = Tab}) when Cookie =/= C ->
    {T, [{drop, {other_table_instance, Tab, From}}]};
handle(From, _Cookie, Msg, T = #t{tcsb = B, tab = Tab}) ->
    case lists:member(From, hm_tcsb:members(B)) of
        true -> epoch_timer(remote(From, Msg, T));
        false -> {T, [{drop, {not_a_member, From, Tab}}]}
    end.

remote(From, {ops, Msgs}, T = #t{status = ready}) when is_list(Msgs) ->
    receive_ops(From, Msgs, T);
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
    %% not caught up yet: keep it for after the state transfer
    case hm_ec_wire:is_op_message(Msg) of
        false -> {T, [{drop, {bad_op_message, Tab, From}}]};
        true -> {T#t{status = {syncing, [Msg | Raw], Empty}}, []}
    end;
remote(From, {snapshot_req}, T = #t{status = ready, ticks = N, snapshots_sent = Sent})
  when is_map_key(From, Sent), N - map_get(From, Sent) < ?SNAPSHOT_RETRY_TICKS ->
    %% one sent lately may still be on its way or being installed: a snapshot carries every
    %% operation not yet stable, after a long cut under load a million of them, and the
    %% member asks again at every tick until it has one
    {T, []};
remote(From, {snapshot_req}, T0 = #t{ticks = N, snapshots_sent = Sent}) ->
    %% a state or delta CRDT table's updates waiting for the epoch's end leave now: the
    %% snapshot shows them, and they must be in the broadcast (its log travels with the
    %% snapshot) or a copy that installs it would hold updates no other copy will receive
    {T1, Flushed} = case T0 of
                        #t{status = ready} -> flush(T0#t{snapshots_sent = Sent#{From => N}});
                        _ -> {T0, []}
                    end,
    %% what a member installs is every row as reads here show it, on disc here first (see
    %% tick/2)
    T = sync_store(write_unwritten(T1)),
    {T, Flushed ++ [{send, From, snapshot(T)}]};
remote(From, Msg = {snapshot, Snap}, T = #t{status = {syncing, _, _}, tab = Tab}) ->
    case hm_ec_wire:is_snapshot(Msg) of
        true -> install(Snap, T);
        false -> {T, [{drop, {bad_message, Tab, From, Msg}}]}
    end;
remote(From, {snapshot_empty}, T = #t{status = {syncing, Raw, Empty}, tcsb = B}) ->
    %% only when every other member holds nothing may this one start from nothing too
    Empty1 = lists:usort([From | Empty]),
    case hm_tcsb:members(B) -- [node_of(B) | Empty1] of
        [] -> install(empty_snapshot(), T);
        _ -> {T#t{status = {syncing, Raw, Empty1}}, []}
    end;
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
            T = sync_store(T0),
            {T1, Ask} = merge_request_back(From, V, T),
            State = merge_state(T, V),
            N = case State of
                    {merge, #{rows := {left_out, _, _}}} -> T1#t.partial_states + 1;
                    _ -> T1#t.partial_states
                end,
            {T1#t{partial_states = N},
             Ask ++ [{send, M, State} || M <- [From | also_behind(From, State, T)]]}
    end;
remote(From, Msg = {merge, _}, T0 = #t{tab = Tab, merge_req = Req}) ->
    case hm_ec_wire:is_merge(Msg) of
        false -> {T0#t{merge_req = none}, [{drop, {bad_message, Tab, From, Msg}}]};
        true ->
            case Req of
                {From, _} -> merge(From, Msg, T0#t{merge_req = none});
                _ -> merge_unasked(From, Msg, T0)
            end
    end;
remote(_From, {merge_none}, T) ->
    {T#t{merge_req = none}, []};
remote(From, {op, Msg}, T) ->
    receive_ops(From, [Msg], T);
remote(From, Ack = {ack, Replica, V, Newest}, T = #t{tcsb = B, tab = Tab}) ->
    case hm_ec_wire:is_ack(Ack) of
        true ->
            {T1, Effs} = flow_release(flow_changed(
                                        T#t{tcsb = hm_tcsb:receive_ack(Replica, V, Newest, B)})),
            {T2, Ask} = merge_request_now(From, T1),
            {T2, Effs ++ Ask};
        false -> {T, [{drop, {bad_message, Tab, From, Ack}}]}
    end;
remote(From, {applied, Dot}, T = #t{waiters = W}) ->
    case W of
        #{Dot := {Caller, Nodes}} ->
            case lists:delete(From, Nodes) of
                [] -> {T#t{waiters = maps:remove(Dot, W)}, [reply(Caller, Dot, ok)]};
                Rest -> {T#t{waiters = W#{Dot := {Caller, Rest}}}, []}
            end;
        _ -> {T, []}
    end;
remote(From, Other, T = #t{tab = Tab}) ->
    {T, [{drop, {bad_message, Tab, From, Other}}]}.

%% Algorithm 1 "on receive" for a member's operations, in the order sent, in one pass
%% (a member sends the operations of a millisecond together; taken one message at a time,
%% the steps around each one cost a seventh of applying it, bench/REPORT.md): each is
%% checked (its shape, its record), handed to causal delivery, and what became deliverable
%% is applied in causal order, the hybrid clock moved past every write applied. A
%% duplicate is counted; a bad message is dropped and the others go on. `sync' callers
%% are answered once for the whole batch.
receive_ops(From, Msgs, T = #t{tcsb = B0, hlc = H0, policy = Policy}) ->
    D0 = hm_tcsb:delivered(B0),
    {Ready, B1, Dups, Syncs, Drops} = deliverable(Msgs, From, T, B0, [], 0, [], []),
    {T1, Evs} = case Ready of
                    [] -> {T#t{tcsb = B1}, []};
                    _ when Policy =:= lww ->
                        apply_ready(T#t{tcsb = B1, hlc = newest_hlc(Ready, H0)}, Ready, D0);
                    _ -> apply_ready(T#t{tcsb = B1}, Ready, D0)
                end,
    Effs = Evs ++ applied_syncs(Syncs, B1),
    {T1#t{duplicates = T#t.duplicates + Dups},
     case Drops of
         [] -> Effs;
         _ -> lists:reverse(Drops, Effs)
     end}.

%% The messages of `Msgs' that are well formed, fit the table and became deliverable, with
%% what causal delivery had buffered and they made deliverable, in delivery order; the
%% duplicates among them (already delivered here) counted, the `sync' ones kept
%% (applied_syncs/2: the well-formed ones of `Msgs', and those buffered before that they
%% made deliverable), the bad ones dropped.
deliverable([], _From, _T, B, Ready, Dups, Syncs, Drops) ->
    {lists:reverse(Ready), B, Dups, Syncs, Drops};
deliverable([Msg | Rest], From, T, B, Ready, Dups, Syncs0, Drops) ->
    Syncs = case Msg of
                {_, _, {sync, _, _}} -> [Msg | Syncs0];
                _ -> Syncs0
            end,
    %% the common case first: well formed and ready on arrival (which checks its vector's
    %% counters); one not ready is checked in full before causal delivery buffers it
    case fits_op(T, Msg) andalso hm_tcsb:receive_ready(Msg, B) of
        {More, B1} ->
            deliverable(Rest, From, T, B1, lists:reverse(More, Ready), Dups,
                        buffered_syncs(More, Syncs), Drops);
        NotReady ->
            case NotReady =:= not_ready andalso hm_causal_buffer:is_message(Msg) of
                true -> deliver_unready(Msg, Rest, From, T, B, Ready, Dups, Syncs, Drops);
                false -> deliverable(Rest, From, T, B, Ready, Dups, Syncs0,
                                     [{drop, {bad_op_message, T#t.tab, From}} | Drops])
            end
    end.

%% A message that is well formed but was not ready on arrival: buffered, a duplicate, or
%% (with what it makes ready) delivered after causal delivery takes note of it.
deliver_unready(Msg, Rest, From, T, B, Ready, Dups, Syncs, Drops) ->
    case hm_tcsb:receive_unready(Msg, B) of
        {[], B1} ->
            %% buffered until its causes arrive, or a duplicate
            Dup = case hm_causal_buffer:is_duplicate(Msg, hm_tcsb:delivered(B)) of
                      true -> 1;
                      false -> 0
                  end,
            deliverable(Rest, From, T, B1, Ready, Dups + Dup, Syncs, Drops);
        {More, B1} ->
            deliverable(Rest, From, T, B1, lists:reverse(More, Ready), Dups,
                        buffered_syncs(More, Syncs), Drops)
    end.

%% The `sync' operations among those a message made deliverable (itself alone, the common
%% case, is among `Syncs' already when it is one).
buffered_syncs([_], Syncs) -> Syncs;
buffered_syncs(More, Syncs) -> [M || M = {_, _, {sync, _, _}} <- More] ++ Syncs.

%% The hybrid clock past every write of `Msgs' (lww, the one policy that orders versions by
%% it: a copy's clock stays ahead of every write it holds).
newest_hlc([{_, _, {_, _, {write, _, {H, _}}}} | Rest], Acc) when H > Acc ->
    newest_hlc(Rest, H);
newest_hlc([_ | Rest], Acc) -> newest_hlc(Rest, Acc);
newest_hlc([], Acc) -> Acc.

%% sync_ec callers at the origin wait for the `applied' answer: every sync operation
%% among `Msgs' that is delivered here is answered, duplicates included (a state transfer may
%% have brought its effect before the operation itself arrived).
applied_syncs([], _) -> [];
applied_syncs(Syncs, B) ->
    Delivered = hm_tcsb:delivered(B),
    [{send, ON, {applied, Dot}}
     || {O = {ON, _}, Ts, _} <- lists:usort(Syncs),
        Dot <- [{O, maps:get(O, Ts)}], hm_vv:contains(Dot, Delivered)].

%% A member's operation is well formed (hm_ec_wire:is_op_shape/1, its vector's counters
%% aside) and fits the table (fits/2): an `async' write of a record, the common case, in
%% one match.
fits_op(#t{crdt = none, record = {Name, Arity}},
        {{N, _}, Ts, {async, Key, {write, Rec, {H, HN}}}})
  when is_atom(N), is_map(Ts), is_integer(H), is_atom(HN), tuple_size(Rec) =:= Arity,
       element(1, Rec) =:= Name, element(2, Rec) =:= Key ->
    true;
fits_op(T, Msg) -> hm_ec_wire:is_op_shape(Msg) andalso fits(T, Msg).

%% A record operation names its record's own key, and the record fits the table; a CRDT
%% table takes CRDT payloads of its type and flavor only.
fits(#t{crdt = none}, {_, _, {_, _, {crdt, _}}}) -> false;
fits(#t{crdt = none, record = {Name, Arity}}, {_, _, {_, Key, Op}}) ->
    case Op of
        {write, Rec, _} -> fits_record(Rec, Key, Name, Arity);
        {delete_object, Rec} -> fits_record(Rec, Key, Name, Arity);
        _ -> true
    end;
fits(#t{crdt = Spec}, {_, _, {_, _, {crdt, Payload}}}) -> hm_ec_crdt:is_payload(Spec, Payload);
fits(#t{}, _) -> false.

fits_record(Rec, Key, Name, Arity) ->
    tuple_size(Rec) =:= Arity andalso element(1, Rec) =:= Name andalso element(2, Rec) =:= Key.

%%% ================================================================ membership and links

%% @doc Member `N' is reachable again, maybe as a new incarnation without its state: forget
%% what it was known to have; retransmission to it resumes from its next acknowledgement.
-spec nodeup(node(), state()) -> {state(), [effect()]}.
nodeup(N, T = #t{tcsb = B}) -> {flow_changed(T#t{tcsb = hm_tcsb:forget_member(N, B)}), []}.

%% @doc Member `N' is unreachable: `sync_ec' callers no longer wait for it, and what it had is
%% relearned from its next acknowledgement (it may come back without its state).
-spec nodedown(node(), state()) -> {state(), [effect()]}.
nodedown(N, T = #t{tcsb = B, waiters = W}) ->
    {W1, Replies} = maps:fold(fun(Dot, {Caller, Nodes}, {Acc, R}) ->
                                      case lists:delete(N, Nodes) of
                                          [] -> {Acc, [reply(Caller, Dot, ok) | R]};
                                          Rest -> {Acc#{Dot => {Caller, Rest}}, R}
                                      end
                              end, {#{}, []}, W),
    {T1, Released} = flow_release(flow_changed(T#t{tcsb = hm_tcsb:forget_member(N, B),
                                                   waiters = W1, up = lists:delete(N, T#t.up)})),
    {T1, Replies ++ Released}.

%% @doc The table's copy holders changed: a removed member no longer holds stability back.
-spec set_members([node()], state()) -> state().
set_members(Ms, T = #t{tcsb = B, acks_sent = Sent}) ->
    B1 = hm_tcsb:set_members(Ms, B),
    %% what was last acknowledged to a node that is no longer a member is forgotten (a
    %% member that comes back hears its next acknowledgement at once)
    flow_changed(T#t{tcsb = B1, acks_sent = maps:with(hm_tcsb:members(B1), Sent)}).

%%% ================================================================ ticks

%% @doc The periodic step (every 250 ms at run time): acknowledgements and retransmission
%% to the reachable members `Up', a snapshot request while syncing, stabilization.
-spec tick([node()], state()) -> {state(), [effect()]}.
tick(Up0, Tx = #t{tcsb = B0}) ->
    Up = Up0 -- [node_of(B0)],
    %% a disc copy acknowledges only what is on disc: a member folds what every member
    %% acknowledged as stable and forgets it, so an operation this copy lost in a crash
    %% could come back from nobody
    T0 = sync_store(Tx),
    {Acks, T = #t{ticks = N}} = acks_due(Up, T0, tick),
    Reach = [M || M <- hm_tcsb:members(B0), lists:member(M, Up)],
    {Resends, B} = lists:foldl(fun(M, {Acc, Bx}) ->
                                       {Msgs, By} = hm_tcsb:resend_due(M, Bx),
                                       {[{send, M, {ops, Msgs}} || Msgs =/= []] ++ Acc, By}
                               end, {[], B0}, Reach),
    Snap = [{send, M, {snapshot_req}} || syncing(T), M <- Reach],
    {Tm, Merge} = merge_request(Reach, T#t{tcsb = B}),
    %% every ?FULL_SCAN_TICKS ticks every key is looked at, as a safety net
    {T1, Evs} = stabilize(Tm, N rem ?FULL_SCAN_TICKS =:= 0),
    {T2, Replies} = release_waiters(Up, T1),
    %% what is still held after that goes once held ?FLOW_HOLD_TICKS ticks
    {T3, Released} = flow_release(T2#t{up = Up}),
    {T4, Old} = release_held(old, T3),
    {flow_changed(T4#t{tcsb = hm_tcsb:tick(T4#t.tcsb), ticks = N + 1}),
     Acks ++ lists:reverse(Resends) ++ Snap ++ Merge ++ Evs ++ Replies ++ Released ++ Old}.

%% @doc The stability step, run between ticks while the table is busy (every few ms at run
%% time): acknowledgements that say something new to the reachable members `Up', and
%% stabilization of what became stable. Under load an operation then leaves the log, and
%% its key its timestamps, within a few of these steps of its last member delivering it, not
%% within two ticks: the log and the metadata a busy table holds stay small, and flow
%% control (flow/1) learns soon how far behind each member is. A `disc_copies' copy syncs
%% its store first: it acknowledges only what is on disc.
-spec acknowledge([node()], state()) -> {state(), [effect()]}.
acknowledge(_Up, T = #t{status = {syncing, _, _}}) -> {T, []};
acknowledge(Up, T0 = #t{tcsb = B}) ->
    {Acks, T} = acks_due(Up -- [node_of(B)], sync_store(T0), new),
    {T1, Evs} = stabilize(T, false),
    {T1, Acks ++ Evs}.

%% A sync_ec caller stops waiting for a member that acknowledged the write (its `applied'
%% answer was lost: it goes once, without waiting for room on a busy connection), that is no
%% longer reachable (a nodedown this copy missed), or whose copy has not acknowledged for
%% ?HEARD_TICKS ticks (a running copy acknowledges at least every ?ACK_EVERY: this one is
%% restarting, or its node's Mnesia has not loaded the table yet, and what is sent to it is
%% lost; one not heard from since this copy started is still waited for). Else the caller waited the whole 30 s timeout: at the end of hm_faults_SUITE's full
%% load, a write on the side of a restarted disc copy whose table Mnesia could not load
%% while cut off held the campaign's end 30 s.
release_waiters(_Up, T = #t{waiters = W}) when map_size(W) =:= 0 -> {T, []};
release_waiters(Up, T = #t{waiters = W, tcsb = B}) ->
    {W1, Replies} =
        maps:fold(fun(Dot, {Caller, Nodes}, {Acc, R}) ->
                          case [N || N <- Nodes, lists:member(N, Up),
                                     not hm_tcsb:silent(N, ?HEARD_TICKS, B),
                                     not hm_vv:contains(Dot, hm_tcsb:reported(N, B))] of
                              [] -> {Acc, [reply(Caller, Dot, ok) | R]};
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

%% Causal stability (§4.7): keys whose entries are all stable lose their timestamps, and
%% their metadata row when storage alone says it all; stable logged operations and clears
%% are forgotten. Only when the stable vector moved: otherwise there is nothing to fold.
%% `Full': every key is looked at, not only those of the operations that just became stable.
stabilize(T = #t{tcsb = B, stable_seen = Seen, fold_after = FA}, Full) ->
    case hm_tcsb:stable(B) of
        Seen -> {T, []};
        V ->
            %% the keys a state this copy caught up with brought unstable entries to: their
            %% operations are not in this copy's log, so every key is looked at once they
            %% are all stable
            T1 = T#t{stable_seen = V, folded = hm_vv:join(T#t.folded, V)},
            case FA =/= none andalso hm_vv:leq(FA, V) of
                true -> stabilize(T1#t{fold_after = none}, V, true);
                false -> stabilize(T1, V, Full)
            end
    end.

stabilize(T0 = #t{tcsb = B, clears = Cs, events = Ev, disc = Disc}, V, Full) ->
    {GoneOps, B1} = hm_tcsb:gc_ops(B),
    %% the dots only where they are used: after a heal a copy may forget the whole cut's
    %% operations at once (bench/REPORT.md)
    Gone = case Disc orelse Ev of
               true -> [{O, maps:get(O, Ts)} || {O, Ts, _} <- GoneOps];
               false -> []
           end,
    %% a disc CRDT table writes its rows before its log forgets operations: a restart
    %% applies the logged ones again to what the rows lack (replay/3)
    T = case GoneOps =/= [] andalso Disc of
            true -> write_unwritten(T0);
            false -> T0
        end,
    %% only the keys of the operations that just became stable can have become stable
    %% (a key is, once its last unstable entry's operation is); every key after a clear,
    %% and on a full scan
    Keys = case Full orelse many_stable(GoneOps, T) of
               true -> all;
               false -> stable_keys(GoneOps, [])
           end,
    {T1a = #t{store = St1}, Dots} = stabilize_keys(T, V, Keys, GoneOps),
    Clears = [C || C = {D, _, _} <- Cs, not hm_vv:contains(D, V)],
    %% a ram copy logs no operation (persist/3)
    St2 = case Disc of
              true -> lists:foldl(fun hm_ec_store:log_del/2, St1, Gone);
              false -> St1
          end,
    T1 = persist_clears(T1a#t{store = St2, tcsb = B1, clears = Clears}, Cs),
    case Ev of
        true ->
            Folded = lists:usort(Dots ++ Gone ++ [D || {D, _, _} <- Cs -- Clears]),
            {T1, [{event, {stabilized, Folded}} || Folded =/= []]};
        false -> {T1, []}
    end.

%% A table of records that forgets more operations than it has unstable keys (the whole cut
%% after a heal) looks at every unstable key: fewer steps than finding the operations' keys.
many_stable(GoneOps, #t{crdt = none, store = St}) ->
    length(GoneOps) > hm_ec_store:meta_size(St);
many_stable(_, _) -> false.

%% The keys the operations touched, a hot key's as often as it was written (stabilize_keys/4
%% looks a key's metadata up when it comes to it: a key folded already has none), or `all'
%% when one of them is a clear.
stable_keys([], Acc) -> Acc;
stable_keys([{_, _, {_, _, clear}} | _], _) -> all;
stable_keys([{_, _, {_, _, {crdt, {batch, Pairs}}}} | Rest], Acc) ->
    stable_keys(Rest, lists:foldl(fun({K, _}, A) -> [K | A] end, Acc, Pairs));
stable_keys([{_, _, {_, Key, _}} | Rest], Acc) -> stable_keys(Rest, [Key | Acc]).

%% The keys and CRDT payloads of operations (an epoch's pairs each).
stable_payloads(Ops) ->
    lists:append([case Op of
                      {crdt, {batch, Pairs}} -> Pairs;
                      {crdt, P} -> [{Key, P}];
                      _ -> [{Key, Op}]
                  end || {_, _, {_, Key, Op}} <- Ops]).

%% The metadata rows of `Keys' (`all': every one).
meta_rows(all, St) -> hm_ec_store:meta_rows(St);
meta_rows(Keys, St) ->
    [{K, KS} || K <- Keys, {ok, KS} <- [hm_ec_store:meta_get(K, St)]].

%% A CRDT table: every key with unstable timestamps is compacted by its CRDT; an unwritten
%% key in memory (its row is written when the epoch ends), another in its row. Only the
%% groups of its PO-log the operations that just became stable named are looked at (an op
%% set's elements: a hot key of 10,000 elements costs what became stable, not a pass over
%% every element), except on a full scan (`all').
stabilize_keys(T0 = #t{crdt = Spec, record = {Name, _}, store = St0, unwritten = U0}, V, Keys,
               GoneOps) when Spec =/= none ->
    Hot = case Keys of
              all -> maps:keys(U0);
              _ -> [K || K <- Keys, is_map_key(K, U0)]
          end,
    Marked = [K || {K, _} <- meta_rows(Keys, St0)],
    %% a key none of them named (every key, on a full scan) is looked at whole (`all')
    Groups = case Keys of
                 all -> #{};
                 _ -> hm_ec_crdt:stable_groups(Spec, stable_payloads(GoneOps))
             end,
    Stabilize = fun(Key, C) -> hm_ec_crdt:stabilize(V, maps:get(Key, Groups, all), C) end,
    T1 = lists:foldl(fun(Key, T = #t{unwritten = U, store = St}) ->
                             case U of
                                 #{Key := C} ->
                                     T#t{unwritten = U#{Key := Stabilize(Key, C)}};
                                 _ ->
                                     case hm_ec_store:read(Key, St) of
                                         [{_, _, C}] ->
                                             C1 = Stabilize(Key, C),
                                             T#t{store = crdt_meta(Key, C1, hm_ec_store:write(
                                                                               {Name, Key, C1}, St))};
                                         _ -> T#t{store = hm_ec_store:meta_del(Key, St)}
                                     end
                             end
                     end, T0, lists:usort(Hot ++ Marked)),
    {T1, []};
stabilize_keys(#t{type = Type, policy = Policy, events = Ev, store = St0} = T, V, Keys,
               _GoneOps) ->
    %% stabilization never changes what reads show (hm_ec_prop checks it): only the
    %% metadata is rewritten
    Fold = fun(Key, KS = {_, KLog}, {St, Ds}) ->
                   case hm_ec_key:stabilize(Type, Policy, {V, KS}) of
                       KS -> {St, Ds};
                       KS1 -> {store_meta(T, Key, KS1, St), [D || Ev, {D, _, _} <- KLog] ++ Ds}
                   end
           end,
    {St1, Dots} =
        case Keys of
            all -> lists:foldl(fun({Key, KS}, Acc) -> Fold(Key, KS, Acc) end, {St0, []},
                               hm_ec_store:meta_rows(St0));
            _ -> lists:foldl(fun(Key, Acc = {St, _}) ->
                                     case hm_ec_store:meta_get(Key, St) of
                                         {ok, KS} -> Fold(Key, KS, Acc);
                                         none -> Acc
                                     end
                             end, {St0, []}, Keys)
        end,
    {T#t{store = St1}, Dots}.

%%% ================================================================ catching up by state

%% A copy far behind a member (the other side's operations after a partition heals, a copy
%% that could not keep up) takes the member's state instead of its operations: applying
%% them one by one costs what the backlog holds, and under full load the backlog of a cut of
%% a few seconds took longer to apply than both sides took to make it, while this copy's
%% writers waited behind it (bench/REPORT.md). The state costs what the table holds.
%%
%% A ready copy asks a member for its state (`{merge_req, Delivered}') when it is behind it
%% by more than the option `catch_up' (operations; `infinity', the default, turns this off)
%% and by more than its table's rows, and has not joined a state in the last
%% ?MERGE_RETRY_TICKS ticks: as soon as the member's acknowledgement tells it so
%% (merge_request_now/2), or at a tick, the reachable member it is furthest behind
%% (merge_request/2). At a tick it also asks a member when it still lacks what that member
%% reported ?STUCK_TICKS ticks ago. A member asked that is as far behind the copy that asks
%% asks it back before it answers (merge_request_back/3). The member answers with the
%% metadata of its unstable keys, the rows of its other keys (or only those of the keys its
%% unstable operations touched, when the copy has the rest: merge_state/2) and its delivered
%% vector (`{merge, State}'), or `{merge_none}', and sends the same state to every other member
%% as far behind by its last acknowledgement (also_behind/3), which joins it without having
%% asked when it is far enough behind (merge_unasked/3). The copy joins each key
%% (hm_ec_key:join/2) and counts the member's delivered vector as delivered
%% (hm_tcsb:merge/2); the operations themselves then arrive as duplicates. It does not log
%% them: their origin does, and every copy that received them as operations, until they
%% are stable. A copy that lacks one that only copies caught up by state still have (its
%% loggers crashed) is stuck behind those copies, and takes their state in turn.
%%
%% A `prwset' clear applies to keys that reach a copy after it: each side's unstable clears
%% leave their delete on every key of its state they have not settled on before the join,
%% and the copy keeps both sides' clears. Only tables of records whose copies are all
%% `ram_copies' (the server sets `catch_up' to `infinity' otherwise: a disc copy would have
%% to log the join for a restart, and cannot take a state when stuck); otherwise the copy
%% catches up by operations.
merge_request(Reach, T = #t{catch_up = Lag, tcsb = B, ticks = N, merge_req = Req,
                            behind = Behind0})
  when Lag =/= infinity ->
    D = hm_tcsb:delivered(B),
    %% a member is asked when it acknowledged lately; an idle one acknowledges only every
    %% ?ACK_EVERY ticks, so how long this copy has lacked what it reported is kept while it
    %% is heard from within twice that
    Alive = [M || M <- Reach, hm_tcsb:acked_within(M, ?FLOW_SILENT_TICKS, B)],
    Heard = [M || M <- Reach, hm_tcsb:acked_within(M, ?HEARD_TICKS, B)],
    %% per member: the tick since which this copy lacks something it reported, and what it
    %% reported then
    Behind = maps:from_list(
               [{M, case Behind0 of
                        #{M := {At, Then}} -> case hm_vv:leq(Then, D) of
                                                  true -> {N, Rep};
                                                  false -> {At, Then}
                                              end;
                        _ -> {N, Rep}
                    end} || M <- Heard, Rep <- [hm_tcsb:reported(M, B)],
                            not hm_vv:leq(Rep, D)]),
    T1 = T#t{behind = Behind},
    Due = case Req of
              {_, Asked} -> N - Asked >= ?MERGE_RETRY_TICKS;
              none -> true
          end,
    case Due andalso takes_state(T1) of
        false -> {T1, []};
        true ->
            Far = [{-L, M} || M <- Alive, is_map_key(M, Behind), L <- [far_behind(M, T1)],
                              L > 0],
            Stuck = [{At, M} || {M, {At, _}} <- maps:to_list(Behind), N - At >= ?STUCK_TICKS,
                                lists:member(M, Alive)],
            case lists:sort(Far) ++ lists:sort(Stuck) of
                [{_, M} | _] -> ask_state(M, T1);
                [] -> {T1#t{merge_req = none}, []}
            end
    end;
merge_request(_, T) -> {T, []}.

%% How many operations this copy lacks of what member `M' reported, when that is enough to
%% catch up by state (far_enough/2); 0 otherwise.
far_behind(M, T = #t{tcsb = B}) ->
    L = hm_tcsb:behind(M, B),
    case far_enough(L, T) of
        true -> L;
        false -> 0
    end.

%% Whether lacking `L' operations of a member is enough to take its state: more than the
%% option `catch_up' and than the table's rows, and no state joined within
%% ?MERGE_RETRY_TICKS ticks (what the members made while this copy joined one arrives as
%% operations).
far_enough(L, T = #t{ticks = N, merged_at = At}) ->
    (At =:= none orelse N - At >= ?MERGE_RETRY_TICKS) andalso worth_a_state(L, T).

%% Whether lacking `L' operations is worth a state rather than the operations: more than
%% the option `catch_up' and than the table's rows.
worth_a_state(L, #t{catch_up = Lag, store = St}) -> L > Lag andalso L > hm_ec_store:size(St).

%% Whether this copy would take now a state that has delivered `V' (far_enough/2).
takes_state_of(V, T = #t{tcsb = B}) ->
    takes_state(T) andalso far_enough(hm_vv:missing(V, hm_tcsb:delivered(B)), T).

%% An acknowledgement tells what its member has delivered: when this copy is far behind
%% it (far_behind/2), it asks for its state at once, not at the next tick (after a heal,
%% the first acknowledgement of the other side is the first news of how far behind).
merge_request_now(From, T = #t{catch_up = Lag, merge_req = none}) when Lag =/= infinity ->
    case takes_state(T) andalso far_behind(From, T) > 0 of
        true -> ask_state(From, T);
        false -> {T, []}
    end;
merge_request_now(_, T) -> {T, []}.

%% A member that asks for this copy's state tells what it has delivered: when that is far
%% ahead of this copy (far_enough/2), this copy asks it back at once rather than once the
%% member's acknowledgements tell the same. After a heal both sides then join each other's
%% state together, not one after the other.
merge_request_back(From, V, T = #t{catch_up = Lag, merge_req = none}) when Lag =/= infinity ->
    case takes_state_of(V, T) of
        true -> ask_state(From, T);
        false -> {T, []}
    end;
merge_request_back(_, _, T) -> {T, []}.

%% The other members that a state built for `From' would catch up too: those that lack as
%% many of this copy's operations, by their last acknowledgement, as would make them take a
%% state (more than `catch_up' and than the table's rows, measured here). After a heal
%% every copy of the other side is as far behind as the first one to ask: built once, the
%% state goes to all of them, and none waits for this copy to answer it in turn. Not only
%% to the members reachable at the last tick: a heal reconnects them one by one within it
%% (what is sent to a node not connected is dropped).
also_behind(From, {merge, _}, T = #t{catch_up = Lag, tcsb = B}) when Lag =/= infinity ->
    D = hm_tcsb:delivered(B),
    Self = node_of(B),
    [M || M <- hm_tcsb:members(B), M =/= From, M =/= Self,
          worth_a_state(hm_vv:missing(D, hm_tcsb:reported(M, B)), T)];
also_behind(_, _, _) -> [].

%% A state this copy did not ask for (also_behind/3 at the member that built it, or the
%% late answer to a request since given up): joined only when this copy lacks enough of it
%% to take a state now (far_enough/2; not within ?MERGE_RETRY_TICKS of its last join).
merge_unasked(From, Msg = {merge, #{delivered := VP}}, T) ->
    case takes_state_of(VP, T) of
        true -> merge(From, Msg, T#t{merge_req = none});
        false -> {T, []}
    end.

%% Ask member `M' for its state, telling what this copy has delivered; the request is
%% asked again after ?MERGE_RETRY_TICKS ticks without an answer (merge_request/2).
ask_state(M, T = #t{tcsb = B, ticks = N}) ->
    {T#t{merge_req = {M, N}}, [{send, M, {merge_req, hm_tcsb:delivered(B)}}]}.

can_merge(#t{status = ready, crdt = none}) -> true;
can_merge(_) -> false.

%% Whether this copy may take a member's state: as a sender can, and a ram copy with
%% `catch_up' on.
takes_state(T = #t{catch_up = Lag, store = St}) ->
    Lag =/= infinity andalso can_merge(T) andalso not hm_ec_store:is_disc(St).

%% What a member joins into its state: the metadata of the unstable keys, the rows of the
%% other keys (an unstable key's metadata holds every version its rows show), the delivered
%% vector and the unstable clears.
%%
%% Only the keys a member may lack, when this copy can tell them (`{left_out, Folded,
%% KeyRows}' for the rows): those of its unstable operations, each with its metadata or else
%% its rows (`KeyRows', `[]' for a key they deleted). Every other key holds nothing but
%% operations this copy has forgotten as stable, which are in `Folded'; a member that has
%% delivered `Folded' has them all, and the join would leave its state of such a key as it
%% is. This copy can tell when the member that asked has delivered `Folded' (`Delivered',
%% what it has; the others the state goes to check it themselves, merge/3), no state it
%% caught up with is still to fold (its operations are in no log here), no clear is unstable
%% (a clear touches every key), and it is a table of records; and it does when those keys
%% are fewer than half its rows (otherwise the whole state costs less to build). This is
%% the anti-entropy of the DottedDB paper (§IV.G, Algorithm 3): only the keys of the
%% operations the other node misses, found through those not yet known everywhere. After a
%% short partition of a large table whose writes go to fewer keys, the state is then the
%% keys written since the cut, not the whole table.
merge_state(T = #t{store = St, tcsb = B, clears = Cs}, Delivered) ->
    case can_merge(T) of
        true ->
            MetaRows = hm_ec_store:meta_rows(St),
            Unstable = maps:from_list(MetaRows),
            Rows = case changed_keys(T, Delivered) of
                       {ok, Keys} ->
                           {left_out, T#t.folded,
                            [{K, hm_ec_store:read(K, St)}
                             || K <- Keys, not is_map_key(K, Unstable)]};
                       full when MetaRows =:= [] -> hm_ec_store:rows(St);
                       full -> [R || R <- hm_ec_store:rows(St),
                                     not is_map_key(element(2, R), Unstable)]
                   end,
            {merge, #{rows => Rows, meta => MetaRows, delivered => hm_tcsb:delivered(B),
                      clears => Cs}};
        false -> {merge_none}
    end.

%% The keys of this copy's unstable operations, each once, when a state may leave out the
%% others for a member that has delivered `Delivered' (merge_state/2); `full' otherwise.
%% Not when they are half the table's rows or more: then the whole state costs less to build.
changed_keys(#t{fold_after = none, clears = [], folded = Folded, tcsb = B, store = St},
             Delivered) ->
    case hm_vv:leq(Folded, Delivered) of
        true ->
            Most = hm_ec_store:size(St) div 2,
            %% the unstable keys are among them: as many are enough to say no
            case hm_ec_store:meta_size(St) < Most andalso
                hm_tcsb:fold_logged(fun(Msg, Keys) -> logged_key(Msg, Keys, Most) end, #{}, B) of
                Keys when is_map(Keys), map_size(Keys) < Most -> {ok, maps:keys(Keys)};
                _ -> full
            end;
        false -> full
    end;
changed_keys(_, _) -> full.

logged_key(_, Keys, Most) when map_size(Keys) >= Most -> {stop, full};
logged_key({_, _, {_, _, clear}}, _, _) -> {stop, full};
logged_key({_, _, {_, Key, _}}, Keys, _) -> Keys#{Key => true}.

%% @doc Whether this copy may catch up by state (see the option `catch_up' of {@link new/1}):
%% `infinity' turns it off, as for a table with a `disc_copies' copy.
-spec set_catch_up(pos_integer() | infinity, state()) -> state().
set_catch_up(Lag, T) -> T#t{catch_up = Lag}.

%% Join member `From''s state into this copy's, key by key, then deliver what that made
%% deliverable among the operations waiting here. A state that left out the keys holding only
%% what this copy has delivered (merge_state/2) is joined on its own keys only (and on every
%% key here when this copy has unstable clears, so that they settle on every key: a key it
%% left out joins as this copy holds it). It is not taken when this copy has not delivered
%% what the keys it left out hold (a member builds such a state for the member that asked,
%% and sends it to the others as far behind too).
merge(From, {merge, #{rows := Rows, meta := MetaRows, delivered := VP, clears := CsP}},
      T = #t{tcsb = B, store = St0, tab = Tab, events = Ev, type = Type, clears = CsR,
             policy = Policy}) ->
    VR = hm_tcsb:delivered(B),
    Usable = case Rows of
                 {left_out, Folded, _} -> hm_vv:leq(Folded, VR);
                 _ -> true
             end,
    case takes_state(T) andalso not hm_vv:leq(VP, VR) andalso Usable of
        false -> {T, []};
        true ->
            Meta = maps:from_list(MetaRows),
            %% the member's rows by key (a set: one each)
            Theirs = case Rows of
                         {left_out, _, KeyRows} -> maps:from_list(KeyRows);
                         _ when Policy =:= siblings ->
                             lists:foldl(fun(R, Acc) ->
                                                 K = element(2, R),
                                                 Acc#{K => [R | maps:get(K, Acc, [])]}
                                         end, #{}, Rows);
                         _ -> maps:from_list([{element(2, R), [R]} || R <- Rows])
                     end,
            %% every key either side holds, each once; only the member's when it left out
            %% the others, unless this copy's clears are to settle on its own
            LeftOut = is_tuple(Rows),
            Own = case LeftOut andalso CsR =:= [] of
                      true -> #{};
                      false -> maps:from_keys(hm_ec_store:all_keys(St0)
                                              ++ hm_ec_store:meta_keys(St0), [])
                  end,
            Keys = maps:keys(maps:merge(maps:merge(Theirs, Meta), Own)),
            {St, Hlc} =
                lists:foldl(
                  fun(K, {Acc, H}) ->
                          %% each side's unstable prwset clears leave their delete on the
                          %% key first, where they have not yet (see effect/2)
                          {Here, Shown} = key_state(K, Acc),
                          Mine = unhandled_clears(Type, K, CsR, Here),
                          Other = case Meta of
                                      #{K := KSP} -> unhandled_clears(Type, K, CsP, KSP);
                                      %% left out: as this copy holds it
                                      _ when LeftOut, not is_map_key(K, Theirs) -> Mine;
                                      _ -> unhandled_clears(Type, K, CsP,
                                                            hm_ec_key:new(maps:get(K, Theirs, [])))
                                  end,
                          case Mine of
                              Other -> {Acc, H};
                              _ -> KS = hm_ec_key:join({VR, Mine}, {VP, Other}),
                                   {store_meta(T, K, KS, show(T, K, KS, Shown, Acc)),
                                    joined_hlc(Policy, H, KS)}
                          end
                  end, {St0, T#t.hlc}, Keys),
            {Ready, B1} = hm_tcsb:merge(VP, B),
            FA = case T#t.fold_after of
                     none -> VP;
                     FA0 -> hm_vv:join(FA0, VP)
                 end,
            %% both sides' clears, each now settled on every key
            Clears = case CsR ++ CsP of
                         [] -> [];
                         _ ->
                             All = maps:from_list([{K, true} || K <- Keys]),
                             [{D, Ts, All} || {D, Ts, _} <- CsR]
                                 ++ [{D, Ts, All} || {D, Ts, _} <- CsP,
                                                     not lists:keymember(D, 1, CsR)]
                     end,
            T1 = flow_changed(T#t{store = St, tcsb = B1, hlc = Hlc, merges = T#t.merges + 1,
                                  behind = #{}, fold_after = FA, clears = Clears,
                                  merged_at = T#t.ticks}),
            {T2, Evs} = apply_ready(T1, Ready, hm_vv:join(VR, VP)),
            {T2, [{info, "hypermnesia: ~p caught up by state from ~p (~p keys)",
                   [Tab, From, length(Keys)]}
                  | [{event, {merged, VP}} || Ev] ++ Evs]}
    end.

%% A key's state with the delete of every unstable clear of `Cs' that has not settled on the
%% key yet, oldest clear first (as effect/2 leaves them before an operation on the key).
unhandled_clears(_Type, _K, [], KS) -> KS;          % no unstable clear: every table but prwset's
unhandled_clears(Type, K, Cs, KS) ->
    lists:foldl(fun({CDot, CTs, Handled}, Acc) ->
                        case maps:is_key(K, Handled) of
                            true -> Acc;
                            false -> hm_ec_key:effect(Type, delete, CDot, CTs, Acc)
                        end
                end, KS, lists:reverse(Cs)).

%% The hybrid clock after a key's join: past the greatest clock of its versions under lww
%% (this copy's clock stays ahead of every write it holds); other policies order no
%% versions by it.
joined_hlc(lww, H, KS) -> max(H, key_hlc(KS));
joined_hlc(_, H, _) -> H.

key_hlc(KS) ->
    lists:foldl(fun({_, {H, _}}, Acc) when is_integer(H) -> max(Acc, H);
                   (_, Acc) -> Acc
                end, 0, hm_ec_key:live(pawset, KS)).

%% A key's state here: its metadata, or the versions storage shows; and what reads show
%% when storage was read for it (`unknown' otherwise: see show/5).
key_state(K, St) ->
    case hm_ec_store:meta_get(K, St) of
        {ok, KS} -> {KS, unknown};
        none -> Rows = hm_ec_store:read(K, St), {hm_ec_key:new(Rows), Rows}
    end.

%%% ================================================================ state transfer

%% What a member that is caught up sends to one that is not: everything reads show, the
%% metadata of unstable keys, the delivered vector they reflect, the logged operations not yet
%% stable (so the receiver can pass them on should their origin die) and the unstable clears.
%% A member still syncing that holds nothing from anyone else says so (a syncing copy makes
%% no operation of its own: it refuses writes until it has installed a state).
snapshot(#t{status = ready, store = St, tcsb = B, clears = Cs}) ->
    {snapshot, #{rows => hm_ec_store:rows(St), meta => hm_ec_store:meta_rows(St),
                 delivered => hm_tcsb:delivered(B), log => hm_tcsb:log_msgs(B), clears => Cs}};
snapshot(#t{tcsb = B}) ->
    case maps:keys(hm_tcsb:delivered(B)) -- [hm_tcsb:self(B)] of
        [] -> {snapshot_empty};
        _ -> {snapshot_none}
    end.

empty_snapshot() -> #{rows => [], meta => [], delivered => #{}, log => [], clears => []}.

%% Install a member's state, then deliver what arrived meanwhile.
install(#{rows := Rows, meta := MetaRows, delivered := V, log := Log, clears := Clears},
        T = #t{tab = Tab, tcsb = Old, status = {syncing, Raw, _}, store = St0,
               tcsb_opts = TOpts, events = Ev}) ->
    St1 = lists:foldl(fun hm_ec_store:delete/2, with_format(hm_ec_store:log_clear(St0)),
                      hm_ec_store:all_keys(St0)),
    St2 = lists:foldl(fun hm_ec_store:meta_del/2, St1, hm_ec_store:meta_keys(St1)),
    St3 = lists:foldl(fun hm_ec_store:write/2, St2, Rows),
    St4 = lists:foldl(fun({K, KS}, Acc) -> hm_ec_store:meta_put(K, KS, Acc) end, St3, MetaRows),
    B0 = hm_tcsb:restore_log(Log, hm_tcsb:new(hm_tcsb:self(Old), hm_tcsb:members(Old), V,
                                              TOpts)),
    %% the member may have caught up by state: its unstable keys may hold entries of
    %% operations its log (now this copy's) lacks, folded once all of `V' is stable
    T0 = persist_clears(flow_changed(T#t{store = St4, tcsb = B0, status = ready,
                                         clears = Clears, stable_seen = undefined,
                                         fold_after = V}), undefined),
    T1 = lists:foldl(fun(M, Acc) -> persist(Acc, M, V) end, T0, Log),
    Effs = [{info, "hypermnesia: ~p caught up (~p rows)", [Tab, length(Rows)]}
            | [{event, {installed, V}} || Ev]],
    lists:foldl(fun(M, {Tx, E}) -> {Ty, E1} = remote(node_of(B0), {op, M}, Tx), {Ty, E ++ E1} end,
                {T1, Effs}, lists:reverse(Raw)).

%%% ================================================================ effects on storage

%% Apply a causally delivered operation to storage (Algorithm 2), then log it on disc with
%% `Delivered', this copy's delivered vector once it is applied. A disc copy first logs what
%% the operation is about to change: Mnesia's log keeps any prefix of the writes through a
%% crash, so one operation's rows, metadata and log writes may be cut short, and the restart
%% undoes them (undo_cut/4; the operation is then not delivered: members resend it, or it
%% was this copy's own and is lost with the crash, as an async_ec write on a disc copy can be).
apply_op(T, Msg, Delivered) ->
    T1 = effect(log_undo(T, Msg), Msg),
    {persist(T1, Msg, Delivered), [{event, {applied, Msg}} || T#t.events]}.

%% Apply operations the broadcast layer delivered, in its order, `Delivered' what this copy
%% had delivered before the first: a disc copy logs, after each one, what it has delivered
%% up to that one.
apply_ready(T = #t{disc = false, events = false}, Ready, _) ->
    %% a ram copy logs nothing (persist/3), and only events make effects here
    {lists:foldl(fun(M, Acc) -> effect(Acc, M) end, T, Ready), []};
apply_ready(T, Ready, Delivered) ->
    {T1, Evs, _} = lists:foldl(fun(M = {O, Ts, _}, {Acc, E, V}) ->
                                       V1 = V#{O => maps:get(O, Ts)},
                                       {Acc1, E1} = apply_op(Acc, M, V1),
                                       {Acc1, E ++ E1, V1}
                               end, {T, [], Delivered}, Ready),
    {T1, Evs}.

log_undo(T = #t{crdt = Spec}, _) when Spec =/= none ->
    %% a CRDT table's operation writes no row (write-behind): nothing to undo (replay/3)
    T;
log_undo(#t{disc = false} = T, _) -> T;
log_undo(T = #t{store = St, clears = Cs}, {Origin, Ts, {_, Key, Op}}) ->
    Keys = case Op of
               clear -> lists:usort(hm_ec_store:all_keys(St) ++ hm_ec_store:meta_keys(St));
               {crdt, {batch, Pairs}} -> lists:usort([K || {K, _} <- Pairs]);
               _ -> [Key]
           end,
    Before = [{K, hm_ec_store:read(K, St), hm_ec_store:meta_get(K, St)} || K <- Keys],
    Dot = {Origin, maps:get(Origin, Ts)},
    T#t{store = hm_ec_store:log_put(undo, {Dot, Before, Cs}, St)}.

effect(T = #t{store = St, type = Type, clears = Cs}, {Origin, Ts, {_Mode, _Key, clear}}) ->
    Keys = lists:usort(hm_ec_store:all_keys(St) ++ hm_ec_store:meta_keys(St)),
    T1 = lists:foldl(fun(K, Acc) -> apply_key(Acc, Origin, Ts, K, delete) end, T, Keys),
    %% remove-wins: the clear also beats writes concurrent with it that arrive later, on keys
    %% not here yet; kept until stable (add-wins: a delete beats nothing it has not seen).
    %% `Handled': keys where the clear's delete is settled (it was applied here, or an
    %% operation that follows the clear has been applied and superseded it).
    case Type of
        prwset ->
            Handled = maps:from_list([{K, true} || K <- Keys]),
            persist_clears(T1#t{clears = [{{Origin, maps:get(Origin, Ts)}, Ts, Handled} | Cs]},
                           Cs);
        pawset -> T1
    end;
effect(T = #t{clears = []}, {Origin, Ts, {_Mode, Key, Op}}) ->
    apply_key(T, Origin, Ts, Key, Op);
effect(T = #t{clears = Cs}, {Origin, Ts, {_Mode, Key, Op}}) ->
    %% first, every unstable clear that has not touched the key yet leaves on it the delete it
    %% would have left had the key been here when the clear arrived (same dot and vector),
    %% oldest clear first; then the operation. One that follows the clear prunes that delete
    %% (hm_ec_key), one concurrent with it loses to it (remove-wins), whatever arrives first.
    {Cs1, T1} = lists:mapfoldl(
                  fun(C = {{CO, _} = CDot, CTs, Handled}, Acc) ->
                          case maps:is_key(Key, Handled) of
                              true -> {C, Acc};
                              false -> {{CDot, CTs, Handled#{Key => true}},
                                        apply_key(Acc, CO, CTs, Key, delete)}
                          end
                  end, T, lists:reverse(Cs)),
    T2 = apply_key(T1, Origin, Ts, Key, Op),
    persist_clears(T2#t{clears = lists:reverse(Cs1)}, Cs).

%% disc_copies: the unstable clears survive a restart too (written only when changed).
persist_clears(T = #t{clears = Cs}, Cs) -> T;
persist_clears(T = #t{clears = Cs, store = St}, _) ->
    T#t{store = hm_ec_store:log_put(clears, Cs, St)}.

%% disc_copies: after the effect, log the operation (until it is stable, for retransmission)
%% and what this replica has delivered with it, `Delivered': not what the broadcast layer has
%% delivered by now, which may count operations of the same batch still to be applied (a
%% crash that kept only this far would restore a vector ahead of storage).
persist(T = #t{disc = false}, _, _) -> T;
persist(T = #t{store = St, tcsb = B}, Msg = {Origin, Ts, _}, Delivered) ->
    St1 = hm_ec_store:log_put({Origin, maps:get(Origin, Ts)}, Msg, St),
    T#t{store = hm_ec_store:log_put(state, {hm_tcsb:self(B), Delivered}, St1),
        unsynced = true}.

%% disc_copies: what was delivered so far is on disc (one `mnesia:sync_log/0').
sync_store(T = #t{unsynced = false}) -> T;
sync_store(T = #t{store = St}) -> T#t{store = hm_ec_store:sync(St), unsynced = false}.

apply_key(T = #t{tcsb = B}, Origin, Ts, _, {crdt, {batch, Pairs}}) ->
    case hm_tcsb:self(B) of
        Origin ->
            %% this incarnation's own epoch: every update in it was applied when it was made
            %% (batch/5), or when the restart that found it unsent replayed it (replay/3)
            T;
        _ ->
            %% an epoch's payloads, in order, to the keys' states in memory
            Dot = {Origin, maps:get(Origin, Ts)},
            lists:foldl(fun({Key, P}, Acc) ->
                                crdt_put(Key, hm_ec_crdt:effect(P, Dot, Ts, crdt_state(Key, Acc)),
                                         Acc)
                        end, T, Pairs)
    end;
apply_key(T = #t{crdt = Spec}, Origin, Ts, Key, {crdt, P}) when Spec =/= none ->
    Dot = {Origin, maps:get(Origin, Ts)},
    C = crdt_state(Key, T),
    %% an operation replayed after a restart may be in the key's state already (replay/3)
    case P of
        {op, _} -> case hm_vv:contains(Dot, hm_crdt:delivered(C)) of
                       true -> T;
                       false -> crdt_put(Key, hm_ec_crdt:effect(P, Dot, Ts, C), T)
                   end;
        _ -> crdt_put(Key, hm_ec_crdt:effect(P, Dot, Ts, C), T)
    end;
apply_key(T = #t{store = St}, Origin, Ts, Key, Op = {write, _, _}) ->
    case hm_ec_store:meta_get(Key, St) of
        none ->
            %% every version of the key is stable, and a write supersedes them all (they
            %% precede it): what storage shows is replaced without being read (the common
            %% case under load, a row lookup saved per operation)
            apply_key(T, Origin, Ts, Key, Op, {[], []}, replace);      % hm_ec_key:new()
        {ok, KS} -> apply_key(T, Origin, Ts, Key, Op, KS, unknown)
    end;
apply_key(T = #t{store = St}, Origin, Ts, Key, Op) ->
    {KS, Shown} = key_state(Key, St),
    apply_key(T, Origin, Ts, Key, Op, KS, Shown).

apply_key(T = #t{type = Type, store = St}, Origin, Ts, Key, Op, KS, Shown) ->
    KS1 = hm_ec_key:effect(Type, Op, {Origin, maps:get(Origin, Ts)}, Ts, KS),
    N = T#t.conflicts + case hm_ec_key:concurrent(Ts, KS) of true -> 1; false -> 0 end,
    T#t{store = store_meta(T, Key, KS1, show(T, Key, KS1, Shown, St)), conflicts = N}.

%% A CRDT table's key: its state in memory when its row lacks updates, else its row's CRDT,
%% else a new one.
crdt_state(Key, #t{crdt = Spec, store = St, unwritten = U}) ->
    case U of
        #{Key := C} -> C;
        _ -> case hm_ec_store:read(Key, St) of
                 [{_, _, C}] -> C;
                 _ -> hm_ec_crdt:new(Spec)
             end
    end.

%% Write-behind: a CRDT table's key's new state stays in memory, its row written when the
%% epoch ends (write_unwritten/1). An update copies nothing: a row's write copies the whole
%% state into ETS, as its read copies it out, so writing every update made building a large
%% value one update at a time cost time quadratic in its size. The key is marked in the
%% store before the update is answered, for readers outside the table's process.
crdt_put(Key, C, T = #t{unwritten = U, store = St}) ->
    case U of
        #{Key := _} -> T#t{unwritten = U#{Key := C}};
        _ -> T#t{unwritten = U#{Key => C}, store = hm_ec_store:unwritten_put(Key, St)}
    end.

%% The rows of the keys held in memory are written (and their marks cleared once written).
%% A key left with timestamps to fold gets its metadata row before its row, so a crash that
%% keeps the row keeps the metadata row stabilization looks for too.
write_unwritten(T = #t{unwritten = U}) when map_size(U) =:= 0 -> T;
write_unwritten(T = #t{unwritten = U, store = St0, record = {Name, _}}) ->
    %% (whether the key holds timestamps is asked once: for a large op-flavor value it
    %% counts every element's timestamps)
    St = maps:fold(fun(Key, C, St) ->
                           Row = {Name, Key, C},
                           St1 = case hm_ec_crdt:is_unstable(C) of
                                     true ->
                                         hm_ec_store:write(
                                           Row, hm_ec_store:meta_put(Key, hm_ec_key:new(), St));
                                     false ->
                                         hm_ec_store:meta_del(Key, hm_ec_store:write(Row, St))
                                 end,
                           hm_ec_store:unwritten_del(Key, St1)
                   end, St0, U),
    T#t{unwritten = #{}, store = St}.

%% A CRDT table keeps a metadata row (an empty key state: a marker) for the keys stability
%% has yet to compact.
crdt_meta(Key, C, St) ->
    case hm_ec_crdt:is_unstable(C) of
        true -> hm_ec_store:meta_put(Key, hm_ec_key:new(), St);
        false -> hm_ec_store:meta_del(Key, St)
    end.

%% What reads show for a key, written only when it changed.
show(T, Key, KS, unknown, St) ->
    show(T, Key, KS, hm_ec_store:read(Key, St), St);
show(#t{type = Type, policy = Policy}, Key, KS, Shown, St) ->
    %% `Shown' is what storage shows, or `replace' (no view: whatever it shows is replaced)
    case {Shown, hm_ec_key:view(Type, Policy, KS)} of
        {View, View} -> St;
        {_, []} -> hm_ec_store:delete(Key, St);
        {_, [R]} when Policy =/= siblings -> hm_ec_store:write(R, St);   % a set: replaces
        {_, View} -> lists:foldl(fun hm_ec_store:write/2, hm_ec_store:delete(Key, St), View)
    end.

%% The key's metadata, only while storage alone does not say it all (hm_ec_key:compact/3;
%% a key with timestamps keeps them, the case of every operation applied).
store_meta(_, Key, KS = {_, [_ | _]}, St) -> hm_ec_store:meta_put(Key, KS, St);
store_meta(#t{type = Type, policy = Policy}, Key, KS, St) ->
    case hm_ec_key:compact(Type, Policy, KS) of
        none -> hm_ec_store:meta_del(Key, St);
        KS1 -> hm_ec_store:meta_put(Key, KS1, St)
    end.

%%% ================================================================ status

%% @doc Status of this copy; `Up' the nodes reachable now.
-spec info([node()], state()) -> map().
info(Up, T = #t{tab = Tab, type = Type, policy = Policy, tcsb = B, waiters = W, store = St}) ->
    #{table => Tab, type => Type, conflict => Policy,
      status => case syncing(T) of true -> syncing; false -> ready end,
      members => hm_tcsb:members(B),
      reachable => [N || N <- hm_tcsb:members(B), N =:= node_of(B) orelse lists:member(N, Up)],
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
      state_catch_ups => T#t.merges, partial_states => T#t.partial_states}.

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
crdt_value(Key, T) -> {ok, hm_ec_crdt:value(crdt_state(Key, T))}.

%% @doc {@link crdt_value/2} in two steps ({@link hm_crdt:value_parts/1}): what the table's
%% process answers a reader, who makes the value of it with {@link hm_crdt:finish_value/1}
%% (a set's sort is then the reader's, not the process's that every update waits for).
-spec crdt_value_parts(term(), state()) ->
          {ok, hm_crdt:value_parts()} | {error, {not_crdt_table, atom()}}.
crdt_value_parts(_, #t{crdt = none, tab = Tab}) -> {error, {not_crdt_table, Tab}};
crdt_value_parts(Key, T) -> {ok, hm_crdt:value_parts(crdt_state(Key, T))}.

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

%% @doc How many queued operations of other members a copy applies in one step before it
%% turns to whatever else arrived meanwhile (local writes, acknowledgements, ticks): the
%% runtime's table process and the simulator's busy receivers both take them this many at
%% a time, so that a heal's backlog never stalls a copy's own writers. A batch of 32 takes
%% about a tenth of a millisecond, and the step's own costs (the process's loop, its
%% queue, its clock) are spread over four times as many operations as with 8
%% (bench/REPORT.md).
-spec work_batch() -> pos_integer().
work_batch() -> 32.
