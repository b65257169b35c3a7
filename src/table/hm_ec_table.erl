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
%% <li>`sync_log': make the local disc writes durable before anything else;</li>
%% <li>`{drop, What}': a message was dropped (log it);</li>
%% <li>`{info, Format, Args}': something worth a log line;</li>
%% <li>`{event, Event}' (only with option `events'): what the simulator's checkers look at:
%% `{applied, Msg}', `{installed, Delivered}', `{stabilized, Dots}'.</li>
%% </ul>
%% Storage goes through {@link hm_ec_store} (Mnesia at run time, maps in the simulator).
%%
%% The steps, in the paper's words:
%% <ul>
%% <li>{@link submit/5}: a local operation is timestamped ("on broadcast"), applied here and
%% sent to every member; `sync' answers once every reachable member applied it.</li>
%% <li>{@link handle/4}: a member's message, after checking it names this table instance, comes
%% from a member and has a valid shape: an operation is delivered in causal order ("on
%% receive") and applied; acknowledgements feed stability; snapshot requests are answered.</li>
%% <li>{@link tick/2}: acknowledgements, retransmission ({@link hm_tcsb:resend_due/2}), a
%% snapshot request while syncing, and stabilization: keys whose entries are all causally
%% stable (§4.7) lose their timestamps and, when storage alone says it all, their metadata.
%% Only the keys of the operations that just became stable are looked at (a key's entries
%% are stable once its last unstable operation is), so a tick costs what became stable, not
%% the number of unstable keys.</li>
%% <li>State transfer: a copy without state (new, or restarted without its disc state) is
%% `syncing': it refuses writes (it has no causal context: a delete would remove records it
%% never saw), asks members for a snapshot, installs the first one and delivers what arrived
%% meanwhile. It starts from nothing only when every other member says it holds nothing from
%% anyone else (the members of a brand-new table).</li>
%% </ul>
%% Per key the state is {@link hm_ec_key}'s; the table holds what reads show, and the metadata
%% store only the keys storage alone cannot represent, so a quiescent table carries none. A
%% `prwset' clear is kept until stable so that it beats concurrent writes that arrive later,
%% on keys not there when it was applied.
%%
%% Invariants: every operation is applied once, in causal order; what reads show for a key
%% is `hm_ec_key:view/3' of its state; stabilization never changes what reads show; a
%% `disc_copies' copy logs every unstable operation and its delivered vector after applying
%% it, so a restart resumes as the same replica.
-module(hm_ec_table).

-export([new/1, submit/5, handle/4, tick/2, nodeup/2, nodedown/2, set_members/2, timeout/2,
         info/2]).
-export([conflicts/1, duplicates/1, tab/1, status/1, tcsb/1, store/1, clears/1, members/1, cookie/1]).
-export_type([state/0, effect/0, event/0, op/0, opts/0]).

-define(SYNC_TIMEOUT_MS, 30000).
-define(ACK_EVERY, 8).
-define(FULL_SCAN_TICKS, 240).

-type op() :: {write, tuple()} | delete | {delete_object, tuple()} | clear
            | {update, term()}.                 % a CRDT table's operation (hm_ec_crdt)
-type event() :: {applied, hm_tcsb:message()} | {installed, hm_vv:vv()}
               | {stabilized, [hm_vv:dot()]}.
-type effect() :: {send, node(), term()} | {reply, term(), term()}
                | {timer, pos_integer(), term()} | sync_log | {drop, term()}
                | {info, string(), list()} | {event, event()}.
-type opts() :: #{tab := atom(), type := hm_ec_key:ec_type(), policy := hm_ec_key:policy(),
                  record := {atom(), pos_integer()}, cookie := term(), node := node(),
                  incarnation := term(), members := [node()], store := hm_ec_store:store(),
                  events => boolean(), tcsb => hm_tcsb:opts(),
                  crdt => none | hm_ec_crdt:spec(), epoch => pos_integer()}.

-record(t, {tab :: atom(),
            type :: hm_ec_key:ec_type(),
            policy :: hm_ec_key:policy(),
            record :: {atom(), pos_integer()},
            cookie :: term(),
            store :: hm_ec_store:store(),
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
            events = false :: boolean(),
            %% a CRDT table's type and flavor (hm_ec_crdt), `none' for a set of records
            crdt = none :: none | hm_ec_crdt:spec(),
            %% state and delta CRDT tables: the broadcast epoch (ms), and the updates applied
            %% here since the last one, newest first, sent as one message when it ends
            epoch = 100 :: pos_integer(),
            batch = [] :: [{term(), hm_ec_crdt:payload()}]}).
-opaque state() :: #t{}.

%%% ================================================================ starting

%% @doc A table copy taken up: restored from the durable log of a `disc_copies' store when it
%% holds the replica's state (a restart: the same replica, its unstable operations still
%% logged), otherwise a new incarnation, `syncing' from the other members (or `ready' alone).
-spec new(opts()) -> {state(), [effect()]}.
new(O = #{tab := Tab, node := Node, members := Ms0, store := St}) ->
    Ms = lists:usort([Node | Ms0]),
    TOpts = maps:get(tcsb, O, #{}),
    T0 = #t{tab = Tab, type = maps:get(type, O), policy = maps:get(policy, O),
            record = maps:get(record, O), cookie = maps:get(cookie, O), store = St,
            tcsb_opts = TOpts, events = maps:get(events, O, false),
            crdt = maps:get(crdt, O, none), epoch = maps:get(epoch, O, 100)},
    Log = hm_ec_store:log_read(St),
    case restorable(Log) of
        {state, {Self, Delivered}} ->
            Logged = [M || {{_, _}, M} <- Log],
            Clears = [C || {clears, Cs} <- Log, C <- Cs],
            B = hm_tcsb:restore_log(Logged, hm_tcsb:new(Self, Ms, Delivered, TOpts)),
            %% a state or delta CRDT table's updates applied but not sent before the restart
            Batch = [U || {crdt_batch, Us} <- Log, U <- Us],
            {T0#t{tcsb = B, clears = Clears, store = with_format(St), batch = Batch},
             [{info, "hypermnesia: ~p restored from disc (~p unstable operations)",
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

%%% ================================================================ local operations

%% @doc A local operation on `Key' (async_ec or sync_ec), `Clock' this node's physical clock
%% in µs (for the hybrid logical clock of `lww'), `Up' the members reachable now. Answers
%% through a `{reply, From, ok | {error, Reason}}' effect: at once for `async', once every
%% reachable member applied it for `sync' (or {@link timeout/2} says it timed out).
-spec submit({term(), op()}, async | sync, term(), {integer(), [node()]}, state()) ->
          {state(), [effect()]}.
submit(_, _, From, _, T = #t{status = {syncing, _, _}, tab = Tab}) ->
    {T, [{reply, From, {error, {syncing, Tab}}}]};
submit({Key, Op}, Mode, From, Env, T = #t{crdt = Spec, tcsb = B, tab = Tab}) ->
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
    {Op, H1} = stamp(Op0, H0, Clock, node_of(B)),
    {Msg = {Self, Ts, _}, Out, B1} = hm_tcsb:broadcast({Mode, Key, Op}, B),
    {T1, Evs} = apply_op(T#t{tcsb = B1, hlc = H1}, Msg),
    Sends = [{send, N, M} || {N, M} <- Out],
    %% a sync write on a disc copy is on disc before any member hears of it: killed in
    %% between, the copy would come back without it and reuse its sequence number
    Durable = [sync_log || Mode =:= sync, hm_ec_store:is_disc(T1#t.store)],
    Reachable = [N || {N, _} <- Out, lists:member(N, Up)],
    case {Mode, Reachable} of
        {sync, [_ | _]} ->
            Dot = {Self, maps:get(Self, Ts)},
            W = T1#t.waiters,
            {T1#t{waiters = W#{Dot => {From, Reachable}}},
             Evs ++ Durable ++ Sends ++ [{timer, ?SYNC_TIMEOUT_MS, {sync_timeout, Dot}}]};
        _ ->
            {T1, Evs ++ Durable ++ Sends ++ [{reply, From, ok}]}
    end.

%% A state or delta CRDT table (ChiaVe's broadcast epoch): the update is applied here at
%% once, and the updates of an epoch leave together, as one message of the table's
%% broadcast, when it ends (for `state', only the last state of each key). A disc copy
%% logs them until then, so a restart sends them.
batch(Key, Payload, C1, From, T = #t{batch = Bt, epoch = Ms, store = St, record = {Name, _}}) ->
    Bt1 = [{Key, Payload} | Bt],
    St1 = crdt_meta(Key, C1, hm_ec_store:write({Name, Key, C1}, St)),
    St2 = case hm_ec_store:is_disc(St1) of
              true -> hm_ec_store:log_put(crdt_batch, Bt1, St1);
              false -> St1
          end,
    {T#t{batch = Bt1, store = St2},
     [{timer, Ms, crdt_epoch} || Bt =:= []] ++ [{reply, From, ok}]}.

%% The epoch ended: its updates leave as one operation, in the order they were made.
flush(T = #t{batch = []}) -> {T, []};
flush(T = #t{batch = Bt, crdt = {_, Flavor}, store = St}) ->
    Pairs = case Flavor of
                state -> lists:ukeysort(1, Bt);    % newest first: the last state of each key
                _ -> lists:reverse(Bt)
            end,
    St1 = case hm_ec_store:is_disc(St) of
              true -> hm_ec_store:log_del(crdt_batch, St);
              false -> St
          end,
    {T1, Effs} = submit_op({'$crdt_epoch', {crdt, {batch, Pairs}}}, async, crdt_epoch,
                           {0, []}, T#t{batch = [], store = St1}),
    {T1, [E || E <- Effs, E =/= {reply, crdt_epoch, ok}]}.

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
            {T#t{waiters = maps:remove(Dot, W)}, [{reply, From, {error, {sync_timeout, Nodes}}}]};
        _ -> {T, []}
    end;
timeout(crdt_epoch, T = #t{status = ready}) -> flush(T);
timeout(crdt_epoch, T = #t{epoch = Ms}) -> {T, [{timer, Ms, crdt_epoch}]};   % not caught up yet
timeout(_, T) -> {T, []}.

%%% ================================================================ members' messages

%% @doc A message from `From' naming table instance `Cookie' (Mnesia's creation cookie):
%% one for another instance (the table deleted and created again under the same name), from
%% a node that is not a member, or of an unknown shape is dropped.
-spec handle(node(), term(), term(), state()) -> {state(), [effect()]}.
handle(From, Cookie, _Msg, T = #t{cookie = C, tab = Tab}) when Cookie =/= C ->
    {T, [{drop, {other_table_instance, Tab, From}}]};
handle(From, _Cookie, Msg, T = #t{tcsb = B, tab = Tab}) ->
    case lists:member(From, hm_tcsb:members(B)) of
        true -> remote(From, Msg, T);
        false -> {T, [{drop, {not_a_member, From, Tab}}]}
    end.

remote(From, {ops, Msgs}, T) when is_list(Msgs) ->
    lists:foldl(fun(M, {Tx, E}) -> {Ty, E1} = remote(From, {op, M}, Tx), {Ty, E ++ E1} end,
                {T, []}, Msgs);
remote(From, {op, Msg}, T = #t{status = {syncing, Raw, Empty}, tab = Tab}) ->
    %% not caught up yet: keep it for after the state transfer
    case hm_ec_wire:is_op_message(Msg) of
        false -> {T, [{drop, {bad_op_message, Tab, From}}]};
        true -> {T#t{status = {syncing, [Msg | Raw], Empty}}, []}
    end;
remote(From, {snapshot_req}, T) ->
    {T, [{send, From, snapshot(T)}]};
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
remote(From, {op, Msg}, T = #t{tcsb = B, hlc = H, tab = Tab}) ->
    case hm_ec_wire:is_op_message(Msg) andalso fits(T, Msg) of
        false -> {T, [{drop, {bad_op_message, Tab, From}}]};
        true ->
            Dup = case hm_causal_buffer:is_duplicate(Msg, hm_tcsb:delivered(B)) of
                      true -> 1;
                      false -> 0
                  end,
            {Ready, B1} = hm_tcsb:receive_op(Msg, B),
            {T1, Evs} = lists:foldl(fun(M, {Acc, E}) ->
                                            {Acc1, E1} = apply_op(Acc, M),
                                            {Acc1, E ++ E1}
                                    end, {T#t{tcsb = B1}, []}, Ready),
            %% sync_ec callers at the origin wait for this: acknowledge every sync operation
            %% delivered here, duplicates included (a state transfer may have brought its
            %% effect before the operation itself arrived)
            Delivered = hm_tcsb:delivered(B1),
            Applied = [{send, ON, {applied, Dot}}
                       || {O = {ON, _}, Ts, {sync, _, _}} <- lists:usort([Msg | Ready]),
                          Dot <- [{O, maps:get(O, Ts)}], hm_vv:contains(Dot, Delivered)],
            H1 = lists:foldl(fun({_, _, {_, _, {write, _, {Hx, _}}}}, Acc) -> max(Acc, Hx);
                                (_, Acc) -> Acc
                             end, H, Ready),
            {T1#t{hlc = H1, duplicates = T1#t.duplicates + Dup}, Evs ++ Applied}
    end;
remote(From, Ack = {ack, Replica, V, Newest}, T = #t{tcsb = B, tab = Tab}) ->
    case hm_ec_wire:is_ack(Ack) of
        true -> {T#t{tcsb = hm_tcsb:receive_ack(Replica, V, Newest, B)}, []};
        false -> {T, [{drop, {bad_message, Tab, From, Ack}}]}
    end;
remote(From, {applied, Dot}, T = #t{waiters = W}) ->
    case W of
        #{Dot := {Caller, Nodes}} ->
            case lists:delete(From, Nodes) of
                [] -> {T#t{waiters = maps:remove(Dot, W)}, [{reply, Caller, ok}]};
                Rest -> {T#t{waiters = W#{Dot := {Caller, Rest}}}, []}
            end;
        _ -> {T, []}
    end;
remote(From, Other, T = #t{tab = Tab}) ->
    {T, [{drop, {bad_message, Tab, From, Other}}]}.

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
nodeup(N, T = #t{tcsb = B}) -> {T#t{tcsb = hm_tcsb:forget_member(N, B)}, []}.

%% @doc Member `N' is unreachable: `sync_ec' callers no longer wait for it, and what it had is
%% relearned from its next acknowledgement (it may come back without its state).
-spec nodedown(node(), state()) -> {state(), [effect()]}.
nodedown(N, T = #t{tcsb = B, waiters = W}) ->
    {W1, Replies} = maps:fold(fun(Dot, {Caller, Nodes}, {Acc, R}) ->
                                      case lists:delete(N, Nodes) of
                                          [] -> {Acc, [{reply, Caller, ok} | R]};
                                          Rest -> {Acc#{Dot => {Caller, Rest}}, R}
                                      end
                              end, {#{}, []}, W),
    {T#t{tcsb = hm_tcsb:forget_member(N, B), waiters = W1}, Replies}.

%% @doc The table's copy holders changed: a removed member no longer holds stability back.
-spec set_members([node()], state()) -> state().
set_members(Ms, T = #t{tcsb = B}) -> T#t{tcsb = hm_tcsb:set_members(Ms, B)}.

%%% ================================================================ ticks

%% @doc The periodic step (every 250 ms at run time): acknowledgements and retransmission
%% to the reachable members `Up', a snapshot request while syncing, stabilization.
-spec tick([node()], state()) -> {state(), [effect()]}.
tick(Up0, T0 = #t{tcsb = B0}) ->
    Up = Up0 -- [node_of(B0)],
    {Acks, T} = acks_due([{M, Ack} || {M, Ack} <- hm_tcsb:acks(B0), lists:member(M, Up)], T0),
    Reach = [M || M <- hm_tcsb:members(B0), lists:member(M, Up)],
    {Resends, B} = lists:foldl(fun(M, {Acc, Bx}) ->
                                       {Msgs, By} = hm_tcsb:resend_due(M, Bx),
                                       {[{send, M, {ops, Msgs}} || Msgs =/= []] ++ Acc, By}
                               end, {[], B0}, Reach),
    Snap = [{send, M, {snapshot_req}} || syncing(T), M <- Reach],
    {T1, Evs} = stabilize(T#t{tcsb = B}),
    {T1#t{tcsb = hm_tcsb:tick(T1#t.tcsb)}, Acks ++ lists:reverse(Resends) ++ Snap ++ Evs}.

syncing(#t{status = {syncing, _, _}}) -> true;
syncing(_) -> false.

%% An acknowledgement goes to a member when it says something new there (what this copy
%% delivered, or the incarnations it heard of, changed since the last one sent), and at least
%% every ?ACK_EVERY ticks otherwise: an idle table costs no message per tick, and a member
%% whose acknowledgement was lost hears it again (its retransmissions stop) within 2 s.
acks_due(Acks, T = #t{acks_sent = Sent, ticks = N}) ->
    Due = [{M, Ack} || {M, Ack} <- Acks,
                       case maps:get(M, Sent, none) of
                           {Ack, At} -> N - At >= ?ACK_EVERY;
                           _ -> true
                       end],
    Sent1 = lists:foldl(fun({M, Ack}, Acc) -> Acc#{M => {Ack, N}} end, Sent, Due),
    {[{send, M, Ack} || {M, Ack} <- Due], T#t{acks_sent = Sent1, ticks = N + 1}}.

%% Causal stability (§4.7): keys whose entries are all stable lose their timestamps, and
%% their metadata row when storage alone says it all; stable logged operations and clears
%% are forgotten. Only when the stable vector moved: otherwise there is nothing to fold.
stabilize(T = #t{tcsb = B, stable_seen = Seen}) ->
    case hm_tcsb:stable(B) of
        Seen -> {T, []};
        V -> stabilize(T#t{stable_seen = V}, V)
    end.

stabilize(T = #t{store = St0, tcsb = B, clears = Cs, events = Ev, ticks = N}, V) ->
    {GoneOps, B1} = hm_tcsb:gc_ops(B),
    Gone = [{O, maps:get(O, Ts)} || {O, Ts, _} <- GoneOps],
    %% only the keys of the operations that just became stable can have become stable
    %% (a key is, once its last unstable entry's operation is); every key after a clear,
    %% and every ?FULL_SCAN_TICKS ticks as a safety net
    Keys = case N rem ?FULL_SCAN_TICKS of
               0 -> all;
               _ -> stable_keys(GoneOps, [])
           end,
    {St1, Dots} = stabilize_keys(T, St0, V, Keys),
    Clears = [C || C = {D, _, _} <- Cs, not hm_vv:contains(D, V)],
    St2 = lists:foldl(fun hm_ec_store:log_del/2, St1, Gone),
    T1 = persist_clears(T#t{store = St2, tcsb = B1, clears = Clears}, Cs),
    Folded = lists:usort(Dots ++ Gone ++ [D || {D, _, _} <- Cs -- Clears]),
    {T1, [{event, {stabilized, Folded}} || Ev, Folded =/= []]}.

%% The keys the operations touched, or `all' when one of them is a clear.
stable_keys([], Acc) -> lists:usort(Acc);
stable_keys([{_, _, {_, _, clear}} | _], _) -> all;
stable_keys([{_, _, {_, _, {crdt, {batch, Pairs}}}} | Rest], Acc) ->
    stable_keys(Rest, [K || {K, _} <- Pairs] ++ Acc);
stable_keys([{_, _, {_, Key, _}} | Rest], Acc) -> stable_keys(Rest, [Key | Acc]).

%% The metadata rows of `Keys' (`all': every one).
meta_rows(all, St) -> hm_ec_store:meta_rows(St);
meta_rows(Keys, St) ->
    [{K, KS} || K <- Keys, {ok, KS} <- [hm_ec_store:meta_get(K, St)]].

%% A CRDT table: every key with unstable timestamps is compacted by its CRDT.
stabilize_keys(#t{crdt = Spec, record = {Name, _}}, St0, V, Keys) when Spec =/= none ->
    St1 = lists:foldl(fun(Key, St) ->
                              case hm_ec_store:read(Key, St) of
                                  [{_, _, C}] ->
                                      C1 = hm_ec_crdt:stabilize(V, C),
                                      crdt_meta(Key, C1, hm_ec_store:write({Name, Key, C1}, St));
                                  _ -> hm_ec_store:meta_del(Key, St)
                              end
                      end, St0, [K || {K, _} <- meta_rows(Keys, St0)]),
    {St1, []};
stabilize_keys(#t{type = Type, policy = Policy, events = Ev} = T, St0, V, Keys) ->
    %% stabilization never changes what reads show (hm_ec_prop checks it): only the
    %% metadata is rewritten
        lists:foldl(fun({Key, KS = {_, KLog}}, {St, Ds}) ->
                            case hm_ec_key:stabilize(Type, Policy, {V, KS}) of
                                KS -> {St, Ds};
                                KS1 -> {store_meta(T, Key, KS1, St),
                                        [D || Ev, {D, _, _} <- KLog] ++ Ds}
                            end
                    end, {St0, []}, meta_rows(Keys, St0)).

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
    T0 = persist_clears(T#t{store = St4, tcsb = B0, status = ready, clears = Clears,
                            stable_seen = undefined}, undefined),
    T1 = lists:foldl(fun(M, Acc) -> persist(Acc, M) end, T0, Log),
    Effs = [{info, "hypermnesia: ~p caught up (~p rows)", [Tab, length(Rows)]}
            | [{event, {installed, V}} || Ev]],
    lists:foldl(fun(M, {Tx, E}) -> {Ty, E1} = remote(node_of(B0), {op, M}, Tx), {Ty, E ++ E1} end,
                {T1, Effs}, lists:reverse(Raw)).

%%% ================================================================ effects on storage

%% Apply a causally delivered operation to storage (Algorithm 2), then log it on disc.
apply_op(T, Msg) ->
    T1 = effect(T, Msg),
    {persist(T1, Msg), [{event, {applied, Msg}} || T#t.events]}.

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
%% and what this replica has delivered.
persist(T = #t{store = St, tcsb = B}, Msg = {Origin, Ts, _}) ->
    case hm_ec_store:is_disc(St) of
        true ->
            St1 = hm_ec_store:log_put({Origin, maps:get(Origin, Ts)}, Msg, St),
            T#t{store = hm_ec_store:log_put(state, {hm_tcsb:self(B), hm_tcsb:delivered(B)}, St1)};
        false -> T
    end.

apply_key(T = #t{store = St0, record = {Name, _}}, Origin, Ts, _, {crdt, {batch, Pairs}}) ->
    %% an epoch's payloads of a key are applied in memory, in order, and the key written once
    %% (a write copies the key's whole state)
    Dot = {Origin, maps:get(Origin, Ts)},
    St = maps:fold(fun(Key, Ps, Acc) ->
                           C1 = lists:foldl(fun(P, C) -> hm_ec_crdt:effect(P, Dot, Ts, C) end,
                                            crdt_state(Key, T#t{store = Acc}), Ps),
                           crdt_meta(Key, C1, hm_ec_store:write({Name, Key, C1}, Acc))
                   end, St0, maps:groups_from_list(fun({K, _}) -> K end,
                                                   fun({_, P}) -> P end, Pairs)),
    T#t{store = St};
apply_key(T = #t{crdt = Spec, store = St, record = {Name, _}}, Origin, Ts, Key, {crdt, P})
  when Spec =/= none ->
    C1 = hm_ec_crdt:effect(P, {Origin, maps:get(Origin, Ts)}, Ts, crdt_state(Key, T)),
    T#t{store = crdt_meta(Key, C1, hm_ec_store:write({Name, Key, C1}, St))};
apply_key(T = #t{type = Type, store = St}, Origin, Ts, Key, Op) ->
    {KS, Shown} = case hm_ec_store:meta_get(Key, St) of
                      {ok, KS0} -> {KS0, unknown};
                      none -> Rows = hm_ec_store:read(Key, St), {hm_ec_key:new(Rows), Rows}
                  end,
    KS1 = hm_ec_key:effect(Type, Op, {Origin, maps:get(Origin, Ts)}, Ts, KS),
    N = T#t.conflicts + case hm_ec_key:concurrent(Ts, KS) of true -> 1; false -> 0 end,
    T#t{store = store_meta(T, Key, KS1, show(T, Key, KS1, Shown, St)), conflicts = N}.

%% A CRDT table's key: its row's CRDT, or a new one.
crdt_state(Key, #t{crdt = Spec, store = St}) ->
    case hm_ec_store:read(Key, St) of
        [{_, _, C}] -> C;
        _ -> hm_ec_crdt:new(Spec)
    end.

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
    case {Shown, hm_ec_key:view(Type, Policy, KS)} of
        {View, View} -> St;
        {_, []} -> hm_ec_store:delete(Key, St);
        {_, [R]} when Policy =/= siblings -> hm_ec_store:write(R, St);   % a set: replaces
        {_, View} -> lists:foldl(fun hm_ec_store:write/2, hm_ec_store:delete(Key, St), View)
    end.

%% The key's metadata, only while storage alone does not say it all.
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
      conflicts => T#t.conflicts, duplicates => T#t.duplicates}.

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
