%% @doc Synchronisation of one state-based or delta-state CRDT replica with its peers, pure
%% (the ChiaVe paper, *ChiaVe: A Flexible CRDT-Based Key-Value Store*, §4: state and delta
%% flavors propagated by the store, delta groups resent until acknowledged; Almeida, Shoker,
%% Baquero, *Delta state replicated data types*, §6: causal delta-merging with a full-state
%% fallback). The replica's CRDT ({@link hm_crdt}) is held by the caller and passed in and
%% out; this module holds what the synchronisation needs beside it and returns the messages
%% to send as `[{Node, Msg}]'.
%%
%% <dl>
%% <dt>`state'</dt><dd>a mutation's event (the whole state) goes to every reachable peer;
%% {@link tick/4} gossips the full state to one peer the caller picks; a peer that comes back
%% ({@link nodeup/3}) gets it at once. Receivers join.</dd>
%% <dt>`delta'</dt><dd>a mutation's delta goes to every reachable peer and is kept; every tick
%% the replica acknowledges what it has delivered (`{ack, Id, Delivered}'), resends as one
%% group its own deltas a peer has not acknowledged, and drops the deltas every member has
%% acknowledged. A peer that lacks what deltas cannot give it (another origin's update, or
%% an own delta already dropped) for 2 ticks in a row, or that comes back, gets the full
%% state (the delta-then-full-state fallback).</dd>
%% </dl>
%%
%% Replica ids are `{Node, Incarnation}': a replica that restarted without its state comes
%% back under a newer incarnation, so no dot is reused. A delta of an older incarnation
%% buffered because an earlier one died with it can never be delivered: any sign of a newer
%% incarnation of that node (a delta delivered, an acknowledgement, this replica's own id)
%% drops it ({@link hm_crdt:drop_pending/2}).
%%
%% It synchronises one object. CRDT tables do not run it: a table's lattice updates are
%% batched per broadcast epoch and carried by the table's tagged causal broadcast
%% ({@link hm_tcsb}, through {@link hm_ec_table}), which already resends what a copy has not
%% acknowledged and brings a copy without state up by state transfer: the same guarantee
%% (every update reaches every copy that stays reachable long enough), with one
%% acknowledgement per table instead of one per key, and no full-state fallback. On the same
%% one-key schedules the table's way sends up to 4.5 times fewer bytes per update (as many,
%% within 10 %, for small deltas through a cut) and 2 to 3.3 times fewer messages; this
%% module converges sooner under heavy loss, because it sends full states
%% (`make bench-crdt-sync', bench/REPORT.md). The simulator runs it for single
%% objects ({@link hm_sim_crdt}) and against the tables' way in that benchmark.
%%
%% Invariants: a delta is dropped only once every member acknowledged it; every message
%% received is applied by join (idempotent, commutative), so loss, duplication and reordering
%% never make replicas diverge once they can talk again.
-module(hm_crdt_sync).

-export([new/2, restore/3, local/4, handle/3, tick/5, nodeup/3, deltas/1, leftovers/2]).
-export_type([sync/0, msg/0]).

%% ticks a delta peer may lag before it gets the full state
-define(BEHIND_TICKS, 2).

-type id() :: {node(), term()}.
-record(y, {flavor :: state | delta,
            id :: id(),
            %% own deltas not yet acknowledged by every member: {Seq, Event}
            deltas = [] :: [{pos_integer(), hm_crdt:event()}],
            %% what each peer node is known to have delivered, under which id
            known = #{} :: #{node() => {id(), hm_vv:vv()}},
            %% ticks in a row each peer lacked what deltas cannot give
            behind = #{} :: #{node() => non_neg_integer()}}).
-opaque sync() :: #y{}.
-type msg() :: {state, hm_crdt:event()} | {delta, [hm_crdt:event()]} | {full, hm_crdt:crdt()}
             | {ack, id(), hm_vv:vv()}.

%% @doc The synchronisation state of replica `Id' of a `state' or `delta' CRDT.
-spec new(state | delta, id()) -> sync().
new(Flavor, Id) when Flavor =:= state; Flavor =:= delta -> #y{flavor = Flavor, id = Id}.

%% @doc After a restart from durable storage: the replica's own deltas kept with its CRDT.
-spec restore(state | delta, id(), [{pos_integer(), hm_crdt:event()}]) -> sync().
restore(Flavor, Id, Deltas) -> (new(Flavor, Id))#y{deltas = Deltas}.

%% @doc Own deltas not yet acknowledged by every member (what a durable replica keeps).
-spec deltas(sync()) -> [{pos_integer(), hm_crdt:event()}].
deltas(#y{deltas = Ds}) -> Ds.

%% @doc A local mutation made `C' (the CRDT after it) and event `Ev': what to send to the
%% reachable peers `Up'.
-spec local(hm_crdt:event(), hm_crdt:crdt(), [node()], sync()) -> {sync(), [{node(), msg()}]}.
local(Ev, _C, Up, Y = #y{flavor = state}) ->
    {Y, [{M, {state, Ev}} || M <- Up]};
local(Ev, C, Up, Y = #y{flavor = delta, id = Id, deltas = Ds}) ->
    Seq = hm_vv:get(Id, hm_crdt:delivered(C)),
    {Y#y{deltas = Ds ++ [{Seq, Ev}]}, [{M, {delta, [Ev]}} || M <- Up]}.

%% @doc A peer's message. Returns the CRDT and state after it, and the errors the CRDT
%% reported (a malformed event or state: it changed nothing).
-spec handle(msg(), hm_crdt:crdt(), sync()) -> {hm_crdt:crdt(), sync(), [term()]}.
handle({ack, Id, V}, C, Y = #y{known = K}) ->
    drop_superseded(C, Y#y{known = learn(Id, V, K)}, []);
handle({state, Ev}, C, Y) ->
    {C1, Errs} = deliver([Ev], C),
    {C1, Y, Errs};
handle({delta, Evs}, C, Y) ->
    {C1, Errs} = deliver(Evs, C),
    drop_superseded(C1, Y, Errs);
handle({full, Other}, C, Y) ->
    case hm_crdt:merge(C, Other) of
        {error, E} -> {C, Y, [{merge, E}]};
        C1 -> drop_superseded(C1, Y, [])
    end.

deliver(Evs, C) ->
    lists:foldl(fun(Ev, {Cx, Errs}) ->
                        case hm_crdt:deliver(Ev, Cx) of
                            {error, E} -> {Cx, Errs ++ [{deliver, E}]};
                            Cy -> {Cy, Errs}
                        end
                end, {C, []}, Evs).

drop_superseded(C, Y = #y{flavor = state}, Errs) -> {C, Y, Errs};
drop_superseded(C, Y = #y{id = Self, known = K}, Errs) ->
    Seen = [Self | maps:keys(hm_crdt:delivered(C))] ++ [Id || {Id, _} <- maps:values(K)],
    Newest = lists:foldl(fun({N, I}, Acc) -> Acc#{N => max(I, maps:get(N, Acc, I))} end,
                         #{}, Seen),
    {hm_crdt:drop_pending(fun({N, I}) -> I < maps:get(N, Newest, I) end, C), Y, Errs}.

%% What a delta peer has delivered, per node: a newer incarnation replaces what was known.
learn(Id = {Node, Inc}, V, Known) ->
    case Known of
        #{Node := {{_, Inc}, Old}} -> Known#{Node := {Id, hm_vv:join(Old, V)}};
        #{Node := {{_, Cur}, _}} when Cur > Inc -> Known;
        _ -> Known#{Node => {Id, V}}
    end.

%% @doc The periodic step of the replica on node `Self', `Up' the peers reachable now,
%% `Members' every member, `Gossip' the peer a `state' replica sends its full state to
%% (`none': nobody). Returns the new state, the messages and how many full states they hold.
-spec tick(node(), [node()], [node()], node() | none, {hm_crdt:crdt(), sync()}) ->
          {sync(), [{node(), msg()}], non_neg_integer()}.
tick(_Self, _Up, _Members, none, {_C, Y = #y{flavor = state}}) -> {Y, [], 0};
tick(_Self, _Up, _Members, Peer, {C, Y = #y{flavor = state}}) -> {Y, [{Peer, {full, C}}], 1};
tick(Self, Up, Members, _Gossip,
     {C, Y = #y{flavor = delta, id = Id, deltas = Ds, known = K, behind = Bh}}) ->
    D = hm_crdt:delivered(C),
    First = case Ds of [{Seq0, _} | _] -> Seq0; [] -> hm_vv:get(Id, D) + 1 end,
    Acks = [{M, {ack, Id, D}} || M <- Up],
    {Out, Bh1, Fulls} =
        lists:foldl(
          fun(M, {O, B, F}) ->
                  case K of
                      #{M := {_, V}} ->
                          Resend = [Ev || {Seq, Ev} <- Ds, Seq > hm_vv:get(Id, V)],
                          O1 = case Resend of [] -> O; _ -> O ++ [{M, {delta, Resend}}] end,
                          Lacks = hm_vv:get(Id, V) < First - 1 orelse
                              lists:any(fun({Or, N}) -> Or =/= Id andalso N > hm_vv:get(Or, V)
                                        end, maps:to_list(D)),
                          Behind = case Lacks of true -> maps:get(M, B, 0) + 1; false -> 0 end,
                          case Behind >= ?BEHIND_TICKS of
                              true -> {O1 ++ [{M, {full, C}}], B#{M => 0}, F + 1};
                              false -> {O1, B#{M => Behind}, F}
                          end;
                      _ -> {O, B, F}
                  end
          end, {Acks, Bh, 0}, Up),
    %% a delta every other member has acknowledged is dropped
    MinAck = lists:min([case K of #{M := {_, V}} -> hm_vv:get(Id, V); _ -> 0 end
                        || M <- Members -- [Self]] ++ [hm_vv:get(Id, D)]),
    {Y#y{deltas = [E || E = {Seq, _} <- Ds, Seq > MinAck], behind = Bh1}, Out, Fulls}.

%% @doc Peer node `Peer' became reachable (a heal, or a restart of either): it gets the full
%% state; a delta replica relearns what it has from its next acknowledgement.
-spec nodeup(node(), hm_crdt:crdt(), sync()) -> {sync(), [{node(), msg()}]}.
nodeup(Peer, C, Y = #y{flavor = state}) -> {Y, [{Peer, {full, C}}]};
nodeup(Peer, C, Y = #y{known = K, behind = B}) ->
    {Y#y{known = maps:remove(Peer, K), behind = maps:remove(Peer, B)}, [{Peer, {full, C}}]}.

%% @doc What must be gone once every replica is quiescent: events the CRDT still buffers,
%% and (delta) own deltas not yet acknowledged by every member.
-spec leftovers(hm_crdt:crdt(), sync()) -> #{atom() => non_neg_integer()}.
leftovers(C, #y{flavor = state}) -> #{crdt_pending => hm_crdt:pending(C)};
leftovers(C, #y{deltas = Ds}) -> #{crdt_pending => hm_crdt:pending(C), deltas => length(Ds)}.
