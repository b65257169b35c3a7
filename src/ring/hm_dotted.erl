%% @doc One copy of a replica group under DottedDB replication, pure: the node-wide dot clocks
%% of *DottedDB: Anti-Entropy without Merkle Trees, Deletes without Tombstones* (§IV, the
%% "Node-wide Dot-based Clocks" framework; Algorithms 1 to 3), which a thin runtime server
%% and the simulator both run. State in, new state and effects out.
%%
%% == What a copy holds (§IV.D) ==
%% <ul>
%% <li>the node clock: every dot this copy has seen ({@link hm_node_clock}, base + bitmap);</li>
%% <li>storage: per key an object `{Versions, Context}': each live version a dot and a value
%% (a delete is a version without value), and the causal context stripped of what the node
%% clock's contiguous bases already say;</li>
%% <li>the dot-key map: the key of every locally stored version's dot, until every copy of
%% the group is known to have the dot (what anti-entropy looks up);</li>
%% <li>the watermark: per copy of the group, the bases of its node clock last heard of;</li>
%% <li>the non-stripped keys: keys whose stored context is not empty yet.</li>
%% </ul>
%%
%% == Steps (named as in the paper) ==
%% <ul>
%% <li>{@link put/4}, {@link delete/3} (Algorithm 1 PUT, DELETE): a fresh dot of this copy, the
%% new version with the client's context (from a {@link get/2} or {@link merge_replies/1}),
%% `update' (merge with the local object and `store'), then the object is sent to every other
%% copy (replicate on write). A put with the context of a get replaces exactly the versions
%% that get returned; versions it did not see stay as concurrent siblings. A delete is a put
%% without value: once its context is stripped, nothing of the key is left (no tombstone: the
%% node clock remembers the deleted dots).</li>
%% <li>{@link fetch/2} (Algorithm 2 `fetch'): the object with its context filled from the node
%% clock's bases; {@link merge_replies/1} merges R copies' replies into the records and an
%% opaque context (Algorithm 1 GET).</li>
%% <li>`store' (Algorithm 2): strip, drop the key when no value and no context are left, add
%% the version dots to the node clock and the dot-key map, track non-stripped keys.</li>
%% <li>{@link timeout/2} of `strip' (Algorithm 3 `strip_causality'): store every non-stripped
%% key again.</li>
%% <li>{@link timeout/2} of `anti_entropy' (Algorithm 3): send the node clock to a random
%% other copy (`sync_clock'); it answers (`sync_repair') with only the objects of dots the
%% sender lacks, found through its dot-key map, and names those dots (as a clock; with their
%% keys only for dots no sent version carries); the receiver merges the objects, adds the
%% named dots to its node clock and its dot-key map, so it can answer for them in turn (the
%% paper adds the answering copy's own entry; the copies of one group hold the same keys, so
%% naming the dots closes the gaps of every id, superseded versions' included), updates the
%% watermark and drops dot-key entries every copy has. With `{anti_entropy, merkle}' the
%% periodic exchange is instead the Merkle-tree baseline of {@link hm_merkle} over the same
%% objects (levels compared, then the differing keys' objects exchanged both ways; a copy
%% whose root equals the sender's shows the same versions, so it takes the sender's node
%% clock).</li>
%% <li>`update' (Algorithm 2) also counts an incoming version found obsolete as seen: its
%% dot goes to the node clock and the dot-key map, as its key's object reflects it.</li>
%% </ul>
%%
%% == Churn ==
%% A copy replaced by a new node id: {@link set_peers/2} on every copy. The old id leaves the
%% watermark; a new copy (option `bootstrap') first asks a peer for all its objects and node
%% clock and dot-key map (a handoff; a key it holds that the peer does not is one the peer
%% deleted, and is merged as such), and is `syncing' until it has them. A copy asked that is
%% syncing itself refuses, and the new copy asks another one at once (or, when every other
%% copy refused, at its next anti-entropy tick). A retired id's dots may stay in contexts
%% with gaps no copy can fill (a write it made that reached nobody): once every remaining
%% copy, having retired the id too, has shown in an exchange that it holds no dot of it this
%% copy lacks, no dot of it can still arrive, and strip drops its entries. A context
%% naming an id that is neither in the group nor retired (a copy that joined after the id
%% left) retires it the same way. An id back in the group (a node holding a copy of the group
%% again: it starts with `bootstrap', so its dots continue after its old ones) is live again
%% and leaves the retired ids. So per-key clocks never keep an entry for a node that is
%% gone: they converge to the ids of the live versions' dots.
%%
%% == Incarnations ==
%% A copy that loses its state (the runtime's copies live in their process) comes back as a
%% new copy at the same address: ids `{Address, Incarnation}' (an integer; {@link
%% address/1}, {@link incarnation/1}). The group is then given by address ({@link new/1},
%% {@link set_peers/2}): an address stands for the id known there, or for the placeholder
%% `{Address, 0}' until a copy is heard from. A message from (or naming, in its sender's
%% group or in a context) a higher incarnation at an address of the group supersedes the id
%% known there: the old id is retired as a replaced copy's (a placeholder just goes), and
%% messages from it are dropped. A retired id waits for the copies at the group's addresses,
%% following each to its newest incarnation. A copy that lost its state lacks dots every copy
%% had, which the dot-key maps no longer name: a `sync_clock' showing such a gap is answered
%% with the whole state, as a handoff. Once a retired id is closed, repairs name every dot of
%% it up to the highest the sender holds, gaps included (no copy holds a dot in a gap): its
%% entry is gone from the stored contexts, and a copy still showing a version of it that was
%% superseded elsewhere must see that it is. Ids without the `{Address, Incarnation}' shape
%% are their own address and never superseded.
%%
%% == Effects ==
%% <ul>
%% <li>`{send, Peer, Msg}': give `Msg' to {@link handle/2} of copy `Peer';</li>
%% <li>`{timer, Ms, Msg}': give `Msg' to {@link timeout/2} in `Ms' ms (`strip' and
%% `anti_entropy', each re-armed by its own timeout);</li>
%% <li>`{show, Key, Values}': reads of `Key' must now show `Values' (a Mnesia table mirrors
%% them; `[]': the key is gone);</li>
%% <li>`{drop, Reason}': a message was dropped (malformed, or from a copy not in the group);</li>
%% <li>`{event, {store, Key, Info}}' (only with option `events'): what the simulator and the
%% benchmark measure at every store: `entries' (node ids in the stored object's clock),
%% `dots' (its live version dots), `stripped' (its context is empty), `removed'.</li>
%% </ul>
%%
%% == Driving it from a server ==
%% Start with {@link new/1} and carry out its effects (the two timers, and a handoff request
%% for a bootstrapping copy). Client requests: {@link put/4}, {@link delete/3}, {@link get/2}
%% (or {@link fetch/2} on R copies and {@link merge_replies/1} at the coordinator). Messages
%% from peers: {@link handle/2}. Timers: {@link timeout/2}. Group changes: {@link set_peers/2}.
%% A copy restarted from its saved state calls {@link recover/1} to re-arm its timers. The
%% anti-entropy peer is drawn from a random state kept in the state (option `seed'), so a run
%% is a function of its inputs.
%%
%% Invariants: every live version's dot is in the node clock; a stored context holds no entry
%% whose dots the node clock's base covers after a strip; a key with neither a value nor a
%% context is not stored; every dot in the node clock is reflected in the objects (live, or
%% superseded by what is stored); a dot-key entry is dropped only when the watermark (for a
%% retired id: the clocks last heard from every other copy) shows every current copy has the
%% dot; what `show' last said for a key is the values of its versions.
-module(hm_dotted).

-export([new/1, put/4, delete/3, get/2, fetch/2, merge_replies/1, new_context/0,
         handle/2, timeout/2, set_peers/2, recover/1]).
-export([address/1, incarnation/1]).
-export([id/1, peers/1, status/1, node_clock/1, objects/1, values/1, clock_entries/2,
         metadata/1, metadata_bytes/1, non_stripped/1, dot_keys/1, tree/1, anti_entropy/1,
         object_bytes/1]).
-export_type([state/0, effect/0, msg/0, context/0, reply/0, opts/0, id/0, address/0]).

-include("hm_dotted.hrl").

%% a copy waiting for its handoff asks again after 2, 4, 8... anti-entropy ticks, at most
-define(MAX_ASK_GAP, 16).

-type id() :: term().
-type address() :: term().
-type context() :: binary().
-opaque reply() :: {dotted_reply, obj()}.
-type msg() :: {replicate, id(), term(), obj()}
             | {sync_clock, id(), [id()], hm_node_clock:clock()}
             | {sync_repair, id(), [id()], hm_node_clock:clock(), [{term(), obj() | none}],
                {resolved, hm_node_clock:clock(), [{dot(), term()}]}
                | {full, [{dot(), term()}]}}
             | {transfer_req, id()}
             | {transfer_refused, id()}
             | {merkle, id(), [id()], hm_node_clock:clock(), hm_merkle:msg()}
             | {merkle_repair, id(), [id()], hm_node_clock:clock(), [{term(), obj() | none}],
                [term()]}.
-type effect() :: {send, id(), msg()} | {timer, pos_integer(), strip | anti_entropy}
                | {show, term(), [term()]} | {drop, term()} | {event, term()}.
-type opts() :: #{id := id(), peers := [id()], seed => integer(),
                  anti_entropy => node_clock | merkle, merkle => hm_merkle:shape(),
                  strip_interval => pos_integer(), sync_interval => pos_integer(),
                  bootstrap => boolean(), events => boolean()}.

-opaque state() :: #d{}.

%%% ================================================================ starting

%% @doc A copy of a group: `id' (this copy's id, never reused by another copy: an
%% incarnation `{Address, Incarnation}' or a plain id), `peers' (every copy of the group, by
%% address or by id, see "Incarnations"), `seed' (the anti-entropy peer choice), `anti_entropy'
%% (`node_clock', the default, or `merkle'), `merkle' (the tree shape, see {@link hm_merkle}),
%% `strip_interval' and `sync_interval' in ms (default 1000 each), `bootstrap' (a new copy of
%% a group that already holds data: it asks a peer for a handoff first), `events'.
-spec new(opts()) -> {state(), [effect()]}.
new(O = #{id := Id, peers := Peers0}) ->
    AE = maps:get(anti_entropy, O, node_clock),
    S = #d{id = Id, peers = lists:usort([Id | to_ids(Peers0, Id, [Id])]),
           nc = hm_node_clock:new(),
           ae = AE,
           tree = case AE of
                      merkle -> hm_merkle:new(maps:get(merkle, O, #{fanout => 16, depth => 3}));
                      node_clock -> undefined
                  end,
           strip_ms = maps:get(strip_interval, O, 1000),
           sync_ms = maps:get(sync_interval, O, 1000),
           rand = rand:seed_s(exsss, {erlang:phash2(Id), maps:get(seed, O, 1), 16#d07}),
           ready = not maps:get(bootstrap, O, false),
           events = maps:get(events, O, false)},
    {S1, Handoff} = case S#d.ready of
                        true -> {S, []};
                        false -> ask_handoff(S)
                    end,
    {S1, timers(S1) ++ Handoff}.

timers(#d{strip_ms = St, sync_ms = Sy}) -> [{timer, St, strip}, {timer, Sy, anti_entropy}].

%% @doc A copy restarted from its saved state: its timers again (the runtime lost them).
-spec recover(state()) -> {state(), [effect()]}.
recover(S = #d{ready = false}) ->
    {S1, Effs} = ask_handoff(S),
    {S1, timers(S1) ++ Effs};
recover(S) -> {S, timers(S)}.

%%% ================================================================ client requests

%% @doc The empty context: a write that supersedes nothing (a blind write).
-spec new_context() -> context().
new_context() -> hm_node_clock:encode(hm_node_clock:new()).

%% @doc PUT (Algorithm 1): write `Value' under `Key', superseding what `Context' (from a get)
%% says the client saw. `{error, bad_context}' for a context no get produced.
-spec put(term(), term(), context(), state()) -> {state(), [effect()]} | {error, bad_context}.
put(Key, Value, Ctx, S) -> write(Key, {v, Value}, Ctx, S).

%% @doc DELETE (Algorithm 1): a put without value. Versions the context does not name are
%% concurrent with the delete and stay.
-spec delete(term(), context(), state()) -> {state(), [effect()]} | {error, bad_context}.
delete(Key, Ctx, S) -> write(Key, ?NULL, Ctx, S).

write(Key, Version, Ctx0, S = #d{id = Id, nc = NC}) ->
    case decode_context(Ctx0) of
        {error, _} = E -> E;
        {ok, Ctx} ->
            {Dot, _} = hm_node_clock:next_dot(Id, NC),
            Obj = {#{Dot => Version}, hm_node_clock:add(Dot, Ctx)},
            {_, StoredCtx} = stored(Key, S),
            {{Vers, _}, S1, Effs} = update(Key, Obj, S),
            %% what is sent: the merged versions with the client's context, what the stored
            %% context still held, and the bases of the ids that matter for this key
            Send = {Vers, fill(hm_node_clock:join(element(2, Obj), StoredCtx), Vers, S1)},
            {S1, Effs ++ [{send, P, {replicate, Id, Key, Send}} || P <- others(S1)]}
    end.

decode_context(B) when is_binary(B) ->
    case hm_node_clock:decode(B) of
        {ok, C} -> {ok, C};
        {error, _} -> {error, bad_context}
    end;
decode_context(_) -> {error, bad_context}.

%% @doc `fetch' (Algorithm 2): this copy's object for `Key', its context filled from the
%% node clock, as a reply for {@link merge_replies/1}.
-spec fetch(term(), state()) -> reply().
fetch(Key, S) ->
    {Vers, Ctx} = stored(Key, S),
    {dotted_reply, {Vers, fill(Ctx, Vers, S)}}.

%% @doc GET with a read quorum of 1: {@link fetch/2} here, then {@link merge_replies/1}.
-spec get(term(), state()) -> {[term()], context()}.
get(Key, S) -> merge_replies([fetch(Key, S)]).

%% @doc The GET coordinator's `reduce(O, merge)': R copies' replies merged into the values of
%% the concurrent versions (in dot order) and an opaque context for a later put or delete.
-spec merge_replies([reply(), ...]) -> {[term()], context()}.
merge_replies(Replies = [_ | _]) ->
    {Vers, Ctx} = lists:foldl(fun({dotted_reply, O}, Acc) -> merge(O, Acc) end,
                              {#{}, hm_node_clock:new()}, Replies),
    {shown(Vers), hm_node_clock:encode(Ctx)}.

%% merge (Algorithm 2): versions both keep, or that one keeps and the other never saw
merge(A, B) -> hm_dcc:join(A, B).

shown(Vers) -> [V || {_, {v, V}} <- lists:sort(maps:to_list(Vers))].

%%% ================================================================ update, store, strip, fill

stored(Key, #d{st = St}) -> maps:get(Key, St, {#{}, hm_node_clock:new()}).

%% fill (Algorithm 2): the context with the node clock's bases of the ids that matter for
%% this object (the group, the object's own ids), and the version dots; and, for a retired
%% id whose gaps are closed here, every dot up to its highest: strip dropped its entry from
%% the stored context, and a copy that still shows a version of it superseded here must see
%% that it is
fill(Ctx, Vers, S = #d{nc = NC, peers = Peers}) ->
    Ids = Peers ++ hm_node_clock:replicas(Ctx) ++ [R || {R, _} <- maps:keys(Vers)],
    with_versions(hm_node_clock:join(
                    hm_node_clock:join(Ctx, hm_node_clock:from_vv(
                                              maps:with(Ids, hm_node_clock:base(NC)))),
                    closed_cover(NC, S)), Vers).

%% The dots of the retired ids closed here, up to the highest `NC' holds of each: no other
%% dot of theirs can arrive, so `NC''s gaps in them are dots no copy holds.
closed_cover(_, #d{closed = []}) -> hm_node_clock:new();
closed_cover(NC, #d{closed = Closed}) ->
    hm_node_clock:from_vv(maps:from_list([{R, M} || R <- Closed,
                                                    M <- [hm_node_clock:max_counter(R, NC)],
                                                    M > 0])).

with_versions(Ctx, Vers) -> hm_node_clock:add_dots(maps:keys(Vers), Ctx).

%% update (Algorithm 2): merge an incoming object (its context complete) with the local one
%% (its context filled with the whole node clock, gaps included: every dot in it is reflected
%% here, so one seen and not live here is obsolete) and store the result
update(Key, Obj, S = #d{nc = NC}) ->
    {Vers, Ctx} = stored(Key, S),
    Local = {Vers, with_versions(hm_node_clock:join(Ctx, NC), Vers)},
    Merged = merge(Local, Obj),
    %% an incoming version found obsolete is a dot of this key whose effect is here: in the
    %% node clock and the dot-key map, as a stored one
    In = maps:keys(element(1, Obj)),
    DKM = case S#d.ae of
              node_clock -> lists:foldl(fun(D, M) -> M#{D => Key} end, S#d.dkm, In);
              merkle -> S#d.dkm
          end,
    %% what is stored of the context: the local and the incoming ones (the node clock's part
    %% is the node clock's to remember, and fill gives it back)
    {MVers, _} = Merged,
    ToStore = {MVers, hm_node_clock:join(Ctx, element(2, Obj))},
    {S1, Effs} = store(Key, ToStore, S#d{nc = hm_node_clock:add_dots(In, NC), dkm = DKM}),
    {Merged, S1, Effs}.

%% store (Algorithm 2)
store(Key, {Vers, Ctx}, S = #d{nc = NC0, st = St, dkm = DKM, nsk = NSK, ae = AE}) ->
    Dots = maps:keys(Vers),
    NC = hm_node_clock:add_dots(Dots, NC0),
    CC = strip(Ctx, NC, S),
    Before = shown(element(1, maps:get(Key, St, {#{}, none}))),
    Empty = shown(Vers) =:= [] andalso hm_node_clock:is_empty(CC),
    St1 = case Empty of
              true -> maps:remove(Key, St);
              false -> St#{Key => {Vers, CC}}
          end,
    DKM1 = case AE of
               node_clock -> lists:foldl(fun(D, M) -> M#{D => Key} end, DKM, Dots);
               merkle -> DKM
           end,
    NSK1 = case hm_node_clock:is_empty(CC) of
               true -> maps:remove(Key, NSK);
               false -> NSK#{Key => true}
           end,
    S1 = retire_unknown(CC, S#d{nc = NC, st = St1, dkm = DKM1, nsk = NSK1,
                                tree = tree_update(Key, St1, S)}),
    After = shown(Vers),
    Show = [{show, Key, After} || After =/= Before],
    Ev = [{event, {store, Key, #{entries => entries(Vers, CC), dots => Dots,
                                 stripped => hm_node_clock:is_empty(CC), removed => Empty}}}
          || S#d.events],
    {S1, Show ++ Ev}.

%% strip (Algorithm 2), and the entries of retired ids whose every surviving dot is here
strip(Ctx, NC, #d{closed = []}) -> hm_node_clock:strip_vv(Ctx, NC);
strip(Ctx, NC, #d{closed = Closed}) ->
    Cover = maps:from_list([{R, M} || R <- Closed, M <- [hm_node_clock:max_counter(R, Ctx)],
                                      M > 0]),
    hm_node_clock:strip_vv(Ctx, hm_node_clock:join(NC, hm_node_clock:from_vv(Cover))).

tree_update(_, _, #d{tree = undefined}) -> undefined;
tree_update(Key, St, #d{tree = T}) ->
    case St of
        #{Key := {Vers, _}} ->
            %% what reads show of the key: its versions with a value
            case lists:sort([DV || DV = {_, {v, _}} <- maps:to_list(Vers)]) of
                [] -> hm_merkle:remove(Key, T);
                Live -> hm_merkle:put(Key, hm_merkle:hash(Live), T)
            end;
        _ -> hm_merkle:remove(Key, T)
    end.

%% node ids in an object's clock: its context's and its versions'
entries(Vers, CC) ->
    length(lists:usort(hm_node_clock:replicas(CC) ++ [R || {R, _} <- maps:keys(Vers)])).

%% strip_causality (Algorithm 3); an object whose context the node clock does not cover any
%% better than when it was stored is left as it is (no write to storage)
strip_causality(S = #d{nsk = NSK, st = St}) ->
    lists:foldl(fun(Key, {Sx, E}) ->
                        case St of
                            #{Key := {_, CC} = Obj} ->
                                case strip(CC, Sx#d.nc, Sx) of
                                    CC -> {Sx, E};
                                    _ -> {Sy, E1} = store(Key, Obj, Sx), {Sy, E ++ E1}
                                end;
                            _ -> {Sx#d{nsk = maps:remove(Key, Sx#d.nsk)}, E}
                        end
                end, {S, []}, lists:sort(maps:keys(NSK))).

%%% ================================================================ timers

%% @doc A timer went off: `strip' (strip_causality) or `anti_entropy' (an exchange with a
%% random other copy; a bootstrapping copy asks for its handoff again, after 2, 4, 8 and at
%% most 16 ticks: each answer is a peer's whole state). Each re-arms itself.
-spec timeout(strip | anti_entropy | term(), state()) -> {state(), [effect()]}.
timeout(strip, S) ->
    {S1, Effs} = strip_causality(S),
    {S1, Effs ++ [{timer, S#d.strip_ms, strip}]};
timeout(anti_entropy, S = #d{ready = false, waited = W, ask_gap = G}) when W + 1 < G ->
    %% a handoff is the whole state: asking every tick would have peers send it again and
    %% again while the first is still on its way or being merged; the gap doubles
    {S#d{waited = W + 1}, [{timer, S#d.sync_ms, anti_entropy}]};
timeout(anti_entropy, S = #d{ready = false, ask_gap = G}) ->
    {S1, Effs} = ask_handoff(S#d{waited = 0, ask_gap = min(2 * G, ?MAX_ASK_GAP), refused = []}),
    {S1, Effs ++ [{timer, S#d.sync_ms, anti_entropy}]};
timeout(anti_entropy, S) ->
    {S1, Effs} = case random_peer(S) of
                     {none, Sx} -> {Sx, []};
                     {P, Sx = #d{ae = node_clock}} ->
                         {Sx, [{send, P, {sync_clock, Sx#d.id, Sx#d.peers, Sx#d.nc}}]};
                     {P, Sx = #d{ae = merkle}} ->
                         {Sx, [{send, P, {merkle, Sx#d.id, Sx#d.peers, Sx#d.nc,
                                          hm_merkle:start(Sx#d.tree)}}]}
                 end,
    {S1, Effs ++ [{timer, S#d.sync_ms, anti_entropy}]};
timeout(_, S) -> {S, []}.

random_peer(S) ->
    case others(S) of
        [] -> {none, S};
        Ps -> random_of(Ps, S)
    end.

others(#d{id = Id, peers = Ps}) -> Ps -- [Id].

%% A handoff is asked of a random other copy, among those that have not refused since the
%% last timed ask.
ask_handoff(S = #d{refused = Refused}) ->
    case others(S) of
        [] -> {S#d{ready = true}, []};
        Os ->
            {P, S1} = random_of(case Os -- Refused of [] -> Os; Left -> Left end, S),
            {S1, [{send, P, {transfer_req, S1#d.id}}]}
    end.

random_of(Ps, S = #d{rand = R}) ->
    {I, R1} = rand:uniform_s(length(Ps), R),
    {lists:nth(I, Ps), S#d{rand = R1}}.

%%% ================================================================ peers' messages

%% @doc A message from another copy of the group. One from an id not in the group (a retired
%% copy) or of an unknown shape is dropped (`{drop, Reason}').
-spec handle(msg() | term(), state()) -> {state(), [effect()]}.
handle(Msg, S0) when is_tuple(Msg), tuple_size(Msg) >= 2 ->
    From = element(2, Msg),
    %% a newer incarnation of a copy (the sender, or one the sender names) supersedes the
    %% one known here
    S = learn([From | named_peers(Msg)], S0),
    case lists:member(From, S#d.peers) andalso From =/= S#d.id of
        false -> {S, [{drop, {not_a_peer, element(1, Msg), From}}]};
        true ->
            try remote(Msg, S)
            catch error:_ -> {S, [{drop, {bad_message, element(1, Msg), From}}]}
            end
    end;
handle(_, S) -> {S, [{drop, bad_message}]}.

remote({replicate, _From, Key, Obj = {Vers, _}}, S) when is_map(Vers) ->
    {_, S1, Effs} = update(Key, Obj, S),
    {S1, Effs};
remote({sync_clock, From, PPeers, NCp}, S = #d{nc = NC, dkm = DKM})
  when is_list(PPeers) ->
    %% the dots the peer lacks that the dot-key map knows, and their keys' objects
    Missing = hm_node_clock:missing(NC, NCp),
    Found = [{D, K} || D <- Missing, #{D := K} <- [DKM]],
    case length(Found) < length(Missing) of
        %% a dot the dot-key map dropped was held by every copy: the peer lacks it only
        %% because it lost its state (a new incarnation), and only a handoff gives it back
        true -> remote({transfer_req, From}, heard(From, PPeers, NCp, S));
        false -> sync_repair_of(From, PPeers, NCp, Found, S)
    end;
remote({transfer_req, From}, S = #d{ready = true, st = St}) ->
    %% a handoff: every object, the node clock and the dot-key map (the new copy must be
    %% able to answer for the dots it takes on)
    {S, [{send, From, {sync_repair, S#d.id, S#d.peers, S#d.nc, maps:to_list(St),
                       {full, maps:to_list(S#d.dkm)}}}]};
remote({transfer_req, From}, S) ->
    %% not caught up itself: the asking copy asks another one
    {S, [{send, From, {transfer_refused, S#d.id}}]};
remote({transfer_refused, From}, S = #d{ready = false, refused = Refused0, ask_gap = G}) ->
    %% the copy asked waits for its handoff too (the copies of a table just created start
    %% one after another): ask another one now, or, when every other copy refused, at the
    %% next anti-entropy tick. Waiting out the gap instead kept a copy syncing, refusing
    %% reads and writes, for up to 30 ticks.
    Refused = lists:usort([From | Refused0]),
    case others(S) -- Refused of
        [] -> {S#d{refused = [], waited = G - 1}, []};
        _ -> ask_handoff(S#d{refused = Refused})
    end;
remote({transfer_refused, _From}, S) ->
    {S, []};
remote({sync_repair, From, PPeers, NCp, Objs0, Mode}, S) when is_list(Objs0) ->
    Objs = case Mode of
               %% a handoff holds every object of the peer: a key stored here and not there
               %% is one the peer deleted (or never had), and the peer's clock says which
               {full, _} -> Objs0 ++ [{K, none} || K <- maps:keys(S#d.st),
                                                   not lists:keymember(K, 1, Objs0)];
               _ -> Objs0
           end,
    {S1, Effs} = repair(Objs, NCp, S),
    NC = case Mode of
             %% a handoff: every object of the peer is here now
             {full, _} -> hm_node_clock:join(S1#d.nc, NCp);
             %% the dots the peer answered for: their keys' objects are merged here now,
             %% so they are reflected here even when no live version carries them (the
             %% paper closes only the peer's own entry, its dots being all in the peer's
             %% dot-key map; naming them closes the gaps of any id, retired ones included)
             {resolved, Clock, _} -> hm_node_clock:join(S1#d.nc, Clock)
         end,
    S2 = case Mode of
             {full, DotKeys} when S1#d.ae =:= node_clock ->
                 S1#d{nc = NC, ready = true, dkm = maps:merge(maps:from_list(DotKeys), S1#d.dkm)};
             {full, _} -> S1#d{nc = NC, ready = true};
             %% and answers for them from now on, as the peer did
             {resolved, Named, Extra} when S1#d.ae =:= node_clock ->
                 Pairs = [{D, K} || {K, {Vers, _}} <- Objs, D <- maps:keys(Vers),
                                    hm_node_clock:contains(D, Named)] ++ Extra,
                 S1#d{nc = NC, dkm = maps:merge(S1#d.dkm, maps:from_list(Pairs))};
             _ -> S1#d{nc = NC}
         end,
    S3 = heard(From, PPeers, NCp, S2),
    case Mode of
        %% what the handoff's clock covers need not stay in the contexts just stored
        {full, _} -> {S4, Effs1} = strip_causality(S3), {S4, Effs ++ Effs1};
        _ -> {S3, Effs}
    end;
remote({merkle, From, PPeers, NCp, Step}, S = #d{tree = T}) when T =/= undefined ->
    Me = S#d.id,
    case hm_merkle:compare(Step, T) of
        done ->
            %% equal roots: the same versions everywhere, so the same dots are obsolete
            case Step of
                {nodes, [{{0, 0}, _}]} ->
                    {heard(From, PPeers, NCp, S#d{nc = hm_node_clock:join(S#d.nc, NCp)}), []};
                _ -> {S, []}
            end;
        %% the peer's clock still says which retired ids' dots it holds: a retired id
        %% must be closed while the trees differ (a version of it superseded elsewhere
        %% keeps them different until then)
        {reply, M} ->
            {heard(From, PPeers, NCp, S), [{send, From, {merkle, Me, S#d.peers, S#d.nc, M}}]};
        {keys, Keys} ->
            {heard(From, PPeers, NCp, S),
             [{send, From, {merkle_repair, Me, S#d.peers, S#d.nc, objects_of(Keys, S), Keys}}]}
    end;
remote({merkle_repair, From, PPeers, NCp, Objs, Want}, S0) when is_list(Want) ->
    {S1, Effs} = repair(Objs, NCp, heard(From, PPeers, NCp, S0)),
    Back = [{send, From, {merkle_repair, S1#d.id, S1#d.peers, S1#d.nc, objects_of(Want, S1), []}}
            || Want =/= []],
    {S1, Effs ++ Back}.

%% sync_repair (Algorithm 3): the objects of the dots the peer lacks (`Found', with their
%% keys), and those dots as a clock; their keys only for dots no sent version carries
sync_repair_of(From, PPeers, NCp, Found, S) ->
    Objs = objects_of(lists:usort([K || {_, K} <- Found]), S),
    Live = maps:from_list([{D, K} || {K, {Vers, _}} <- Objs, D <- maps:keys(Vers)]),
    Extra = [P || P = {D, K} <- Found, maps:get(D, Live, none) =/= K],
    Resolved = hm_node_clock:from_dots([D || {D, _} <- Found]),
    S1 = heard(From, PPeers, NCp, S),
    {S1, [{send, From, {sync_repair, S#d.id, S#d.peers, S#d.nc, Objs,
                        {resolved, Resolved, Extra}}}]}.

%% the copies a message's sender names as its group
named_peers(Msg) when element(1, Msg) =:= sync_clock; element(1, Msg) =:= sync_repair;
                      element(1, Msg) =:= merkle; element(1, Msg) =:= merkle_repair ->
    case element(3, Msg) of
        Ps when is_list(Ps) -> Ps;
        _ -> []
    end;
named_peers(_) -> [].

%% The objects of `Keys' as a repair sends them: as stored, with the dots of the retired
%% ids closed here (their entries were stripped from the stored contexts; a copy that still
%% shows a version of one, superseded here, must see that it is)
objects_of(Keys, S = #d{st = St, nc = NC}) ->
    Cover = closed_cover(NC, S),
    [{K, case maps:get(K, St, none) of
             none -> none;
             {Vers, Ctx} -> {Vers, hm_node_clock:join(Ctx, Cover)}
         end} || K <- Keys].

%% sync_repair's update of every object received, filled from the sender's node clock
repair(Objs, NCp, S) ->
    Base = hm_node_clock:base(NCp),
    {Effs, Sn, _} =
        lists:foldl(fun({K, O}, {E, Sx, Gaps0}) ->
                            {Vers, Ctx} = case O of
                                              none -> {#{}, hm_node_clock:new()};
                                              {V, C} when is_map(V) -> {V, C}
                                          end,
                            %% the bases of the ids that matter here: the group's, the
                            %% object's, and those of the versions stored here
                            Ids = Sx#d.peers ++ hm_node_clock:replicas(Ctx)
                                ++ [R || {R, _} <- maps:keys(Vers)]
                                ++ [R || {R, _} <- maps:keys(element(1, stored(K, Sx)))],
                            {Cover, Gaps} = closed_gaps(NCp, Sx, Gaps0),
                            Full = with_versions(
                                     hm_node_clock:join(
                                       hm_node_clock:join(Ctx, hm_node_clock:from_vv(
                                                                 maps:with(Ids, Base))),
                                       Cover), Vers),
                            {_, Sy, E1} = update(K, {Vers, Full}, Sx),
                            {E ++ E1, Sy, Gaps}
                    end, {[], S, none}, Objs),
    {Sn, Effs}.

%% The gaps of the retired ids closed here that the sender's clock `NCp' may name
%% (hm_node_clock:close_gaps/3), computed again only when the closed ids change: a repair
%% brings no dot of a closed id that this copy lacks (it was closed because this copy holds
%% every one any copy holds), so its entries of them stay the same meanwhile.
closed_gaps(_, #d{closed = C}, {C, Cover} = Gaps) -> {Cover, Gaps};
closed_gaps(NCp, #d{closed = C, nc = NC}, _) ->
    Cover = hm_node_clock:close_gaps(C, NCp, NC),
    {Cover, {C, Cover}}.

%% the dots of id `R' above its base (the entry's bitmap)
entry_dots(R, NC) ->
    [{R, C} || C <- lists:seq(hm_node_clock:base(R, NC) + 1, hm_node_clock:max_counter(R, NC)),
               hm_node_clock:contains({R, C}, NC)].

%% What a peer's node clock tells: the watermark (Algorithm 3 sync_repair), dot-key entries
%% every copy has, and whether a retired id's gaps can be closed.
heard(P, PPeers, NCp, S0 = #d{wm = WM, id = Id, nc = NC, peers = Peers}) ->
    S = S0#d{heard = (S0#d.heard)#{P => NCp}},
    WM1 = case lists:member(P, Peers) of
              true -> WM#{P => hm_vv:join(maps:get(P, WM, #{}), hm_node_clock:base(NCp)),
                          Id => hm_node_clock:base(NC)};
              false -> WM#{Id => hm_node_clock:base(NC)}
          end,
    S1 = confirm_retired(P, PPeers, NCp, S#d{wm = WM1}),
    gc_dot_keys(S1).

%% remove dot-key entries known by every copy of the group (Algorithm 3): through the
%% watermark's bases for the group's ids; for a retired id, whose entry may keep gaps for
%% good, through the clocks last heard from every other copy
gc_dot_keys(S = #d{dkm = DKM, wm = WM, peers = Peers, heard = H}) ->
    Min = fun(N) -> lists:min([hm_vv:get(N, maps:get(M, WM, #{})) || M <- Peers]) end,
    Known = maps:from_list([{N, Min(N)} || N <- lists:usort([N || {N, _} <- maps:keys(DKM)]),
                                           lists:member(N, Peers)]),
    Others = others(S),
    Everywhere = fun(D) -> lists:all(fun(M) -> case H of
                                                   #{M := NCm} -> hm_node_clock:contains(D, NCm);
                                                   _ -> false
                                               end
                                     end, Others)
                 end,
    S#d{dkm = maps:filter(fun(D = {N, C}, _) ->
                                  case Known of
                                      #{N := K} -> C > K;
                                      _ -> not Everywhere(D)
                                  end
                          end, DKM)}.

%%% ================================================================ churn

%% @doc The group is now `Peers', by address or id (a copy replaced by a new id, added or
%% removed; see "Incarnations" for addresses). Retired ids
%% leave the watermark; their dots stay in the node clock, which closes their gaps once every
%% remaining copy has shown it holds no dot of theirs this copy lacks.
-spec set_peers([id() | address()], state()) -> {state(), [effect()]}.
set_peers(Peers0, S = #d{id = Id, peers = Peers}) ->
    {set_ids(to_ids(Peers0, Id, Peers), S), []}.

%% The ids of the copies at `Addrs': an id as it is; an address, the id of the copy known
%% there, or (none known) its placeholder: the address itself when this copy's id has no
%% incarnation, else `{Address, 0}', superseded by the first id heard from there.
to_ids(Addrs, Id, Peers) ->
    Known = by_address(Peers),
    [case {is_incarnation(A), Known} of
         {true, _} -> A;
         {false, #{A := P}} -> P;
         {false, _} -> case is_incarnation(Id) of
                           true -> {A, 0};
                           false -> A
                       end
     end || A <- Addrs].

%% Newer incarnations among `Ids' of copies of the group supersede the ids known here: the
%% old id is retired as a replaced copy's is (a placeholder just goes: it made no dot).
%% (Called on every message and every store: ids of the group, the usual case, cost a
%% membership test each.)
learn(Ids, S = #d{id = Me, peers = Peers}) ->
    case [Id || Id <- Ids, is_incarnation(Id), not lists:member(Id, Peers)] of
        [] -> S;
        Others ->
            Known = by_address(Peers),
            %% the highest incarnation named per address (usort: ascending, the last wins)
            Newest = by_address(lists:usort(Others)),
            New = [Id || {A, Id} <- maps:to_list(Newest), A =/= address(Me),
                         #{A := P} <- [Known], incarnation(P) < incarnation(Id)],
            case New of
                [] -> S;
                _ ->
                    Gone = [maps:get(address(Id), Known) || Id <- New],
                    set_ids((Peers -- Gone) ++ New, S)
            end
    end.

%% Ids by address (the last of a list wins).
by_address(Ids) -> maps:from_list([{address(Id), Id} || Id <- Ids]).

%% @doc The address of a copy id: `A' for an incarnation `{A, Inc}' (`Inc' an integer),
%% else the id itself. Copies are sent messages at their address; a copy that restarts
%% without its state comes back at the same address under a higher incarnation.
-spec address(id()) -> address().
address({A, I}) when is_integer(I) -> A;
address(Id) -> Id.

%% @doc The incarnation of a copy id (0 for an id without one, and for a placeholder).
-spec incarnation(id()) -> non_neg_integer().
incarnation({_, I}) when is_integer(I) -> I;
incarnation(_) -> 0.

is_incarnation({_, I}) -> is_integer(I);
is_incarnation(_) -> false.

is_placeholder({_, 0}) -> true;
is_placeholder(_) -> false.

set_ids(Peers0, S = #d{id = Id, peers = Old, wm = WM, retired = Ret}) ->
    Peers = lists:usort([Id | Peers0]),
    Gone = [G || G <- Old -- Peers, not is_placeholder(G)],
    %% a retired id waits for the copies of the group: for the copy now at the address of
    %% one it waited for (a newer incarnation, which may hold what a handoff gave it), and
    %% no longer for one that left
    At = by_address(Peers),
    Now = fun(P) -> case lists:member(P, Peers) of
                        true -> [P];
                        false -> case maps:find(address(P), At) of
                                     {ok, Q} when Q =/= Id ->
                                         [Q || incarnation(Q) > incarnation(P)];
                                     _ -> []
                                 end
                    end
          end,
    Ret1 = lists:foldl(fun(G, Acc) -> Acc#{G => Peers -- [Id]} end,
                       maps:map(fun(_, Ps) -> lists:usort(lists:flatmap(Now, Ps)) end, Ret),
                       Gone),
    %% an id back in the group (a node that left the group and holds a copy again, its dots
    %% continuing after its old ones) is a live id again, not a retired one
    S1 = S#d{peers = Peers, wm = maps:with(Peers, WM), retired = maps:without(Peers, Ret1),
             closed = S#d.closed -- Peers, heard = maps:with(Peers, S#d.heard)},
    gc_dot_keys(close_retired(S1)).

%% A context naming an id that is not in the group and was never retired here (a copy that
%% joined after it left learns of it so): retired like the others.
retire_unknown(CC, S0) ->
    %% a newer incarnation of a copy of the group is learnt, not retired
    S = #d{peers = Peers, retired = Ret, closed = Closed} = learn(hm_node_clock:replicas(CC), S0),
    case [R || R <- hm_node_clock:replicas(CC), not lists:member(R, Peers),
               not maps:is_key(R, Ret), not lists:member(R, Closed)] of
        [] -> S;
        New -> close_retired(S#d{retired = maps:merge(Ret, maps:from_list(
                                                             [{R, others(S)} || R <- New]))})
    end.

confirm_retired(P, PPeers, NCp, S = #d{retired = Ret, nc = NC}) ->
    Ret1 = maps:map(fun(Old, Waiting) ->
                            case lists:member(P, Waiting) andalso not lists:member(Old, PPeers)
                                andalso entry_leq(Old, NCp, NC) of
                                true -> Waiting -- [P];
                                false -> Waiting
                            end
                    end, Ret),
    close_retired(S#d{retired = Ret1}).

close_retired(S = #d{retired = Ret}) ->
    Done = [Old || {Old, []} <- maps:to_list(Ret)],
    S#d{retired = maps:without(Done, Ret), closed = lists:usort(Done ++ S#d.closed)}.

%% every dot of id `R' in `A' is in `B'
entry_leq(R, A, B) ->
    hm_node_clock:max_counter(R, A) =< hm_node_clock:base(R, B) orelse
        lists:all(fun(D) -> hm_node_clock:contains(D, B) end,
                  [{R, C} || C <- lists:seq(hm_node_clock:base(R, B) + 1,
                                            max(hm_node_clock:base(R, B),
                                                hm_node_clock:base(R, A)))]
                  ++ entry_dots(R, A)).

%%% ================================================================ inspection

%% @doc This copy's node id.
-spec id(state()) -> id().
id(#d{id = Id}) -> Id.

%% @doc The group's copies, this one included.
-spec peers(state()) -> [id()].
peers(#d{peers = P}) -> P.

%% @doc `ready', or `syncing' while a bootstrapping copy waits for its handoff.
-spec status(state()) -> ready | syncing.
status(#d{ready = true}) -> ready;
status(#d{ready = false}) -> syncing.

%% @doc The node clock.
-spec node_clock(state()) -> hm_node_clock:clock().
node_clock(#d{nc = NC}) -> NC.

%% @doc Storage: per key its versions (dot => `{v, Value}' or `null') and stripped context.
-spec objects(state()) -> #{term() => obj()}.
objects(#d{st = St}) -> St.

%% @doc What reads show: per stored key with a value, its values in dot order.
-spec values(state()) -> #{term() => [term()]}.
values(#d{st = St}) ->
    maps:filter(fun(_, V) -> V =/= [] end, maps:map(fun(_, {Vers, _}) -> shown(Vers) end, St)).

%% @doc Node ids in the stored clock of `Key' (context and versions; 0 when not stored).
-spec clock_entries(term(), state()) -> non_neg_integer().
clock_entries(Key, #d{st = St}) ->
    case St of
        #{Key := {Vers, CC}} -> entries(Vers, CC);
        _ -> 0
    end.

%% @doc Metadata sizes: node clock entries, dot-key map entries, watermark cells,
%% non-stripped keys, Merkle tree (inner hashes plus key-hash pairs), retired ids pending.
-spec metadata(state()) -> #{atom() => non_neg_integer()}.
metadata(#d{nc = NC, dkm = DKM, wm = WM, nsk = NSK, tree = T, retired = R}) ->
    #{node_clock => hm_node_clock:size(NC), dot_keys => map_size(DKM),
      watermark => lists:sum([map_size(V) || V <- maps:values(WM)]),
      non_stripped => map_size(NSK), retired => map_size(R),
      merkle => case T of undefined -> 0; _ -> hm_merkle:size(T) end}.

%% @doc Metadata sizes in bytes (external term format): what node-clock anti-entropy keeps
%% (node clock, dot-key map, watermark, non-stripped keys) and what Merkle anti-entropy keeps
%% (the tree).
-spec metadata_bytes(state()) -> #{node_clock_ae := non_neg_integer(),
                                   merkle_ae := non_neg_integer()}.
metadata_bytes(#d{nc = NC, dkm = DKM, wm = WM, nsk = NSK, tree = T}) ->
    #{node_clock_ae => erlang:external_size({NC, DKM, WM, NSK}),
      merkle_ae => case T of undefined -> 0; _ -> erlang:external_size(T) end}.

%% @doc The non-stripped keys.
-spec non_stripped(state()) -> [term()].
non_stripped(#d{nsk = NSK}) -> lists:sort(maps:keys(NSK)).

%% @doc The dot-key map.
-spec dot_keys(state()) -> #{dot() => term()}.
dot_keys(#d{dkm = DKM}) -> DKM.

%% @doc The Merkle tree (`undefined' with node-clock anti-entropy).
-spec tree(state()) -> hm_merkle:tree() | undefined.
tree(#d{tree = T}) -> T.

%% @doc `node_clock' or `merkle'.
-spec anti_entropy(state()) -> node_clock | merkle.
anti_entropy(#d{ae = AE}) -> AE.

%% @doc Bytes of an anti-entropy message's object payload (keys and objects), to split
%% traffic into object data and synchronisation metadata.
-spec object_bytes(msg() | term()) -> non_neg_integer().
object_bytes({sync_repair, _, _, _, Objs, _}) -> erlang:external_size(Objs);
object_bytes({merkle_repair, _, _, _, Objs, _}) -> erlang:external_size(Objs);
object_bytes(_) -> 0.
