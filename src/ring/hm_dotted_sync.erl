%% @doc Anti-entropy between the copies of a replica group: the node-clock exchange of
%% *DottedDB: Anti-Entropy without Merkle Trees, Deletes without Tombstones* (§IV,
%% Algorithm 3), and the exchange of the Merkle-tree baseline ({@link hm_merkle}) it is
%% compared with. Part of the per-copy core ({@link hm_dotted}); pure over its state
%% (`hm_dotted.hrl').
%%
%% <ul>
%% <li>The anti-entropy tick ({@link exchange/1}) sends the node clock to a random other copy
%% (`sync_clock'), or with `{anti_entropy, merkle}' the tree's first level (`merkle').</li>
%% <li>`sync_clock': the answer (`sync_repair') holds only the objects of the dots the
%% sender lacks, found through the dot-key map, and names those dots. A dot the map dropped
%% was held by every copy: a sender lacking it lost its state, and is answered with a
%% handoff ({@link hm_dotted_churn:transfer_req/2}).</li>
%% <li>`sync_repair': the objects are merged (`update', {@link hm_dotted_store}), the named
%% dots join the node clock and the dot-key map; a handoff (mode `full') brings the peer's
%% whole state.</li>
%% <li>`merkle', `merkle_repair': levels compared, then the differing keys' objects
%% exchanged both ways; equal roots mean the same versions, so the sender's node clock is
%% taken.</li>
%% <li>The node clocks peers send in the exchange feed the watermark (per copy, the bases of
%% its node clock last heard of), and dot-key entries every copy has are dropped.</li>
%% </ul>
%%
%% Invariant: a dot-key entry is dropped only when the watermark (for a retired id: the
%% clocks last heard from every other copy) shows every current copy has the dot.
-module(hm_dotted_sync).
-include("hm_dotted.hrl").

-export([exchange/1, sync_clock/4, sync_repair/6, merkle/5, merkle_repair/6, heard/4,
         gc_dot_keys/1]).

%%% ================================================================ the periodic exchange

%% The anti-entropy tick of a copy that is ready: the first message of an exchange with a
%% random other copy, the node clock (`sync_clock') or the Merkle tree's first level
%% (`merkle'). The caller re-arms the timer.
-spec exchange(#d{}) -> {#d{}, effects()}.
exchange(S) ->
    case random_peer(S) of
        {none, Sx} -> {Sx, []};
        {P, Sx = #d{ae = node_clock}} ->
            {Sx, [{send, P, {sync_clock, Sx#d.id, Sx#d.peers, Sx#d.nc}}]};
        {P, Sx = #d{ae = merkle}} ->
            {Sx, [{send, P, {merkle, Sx#d.id, Sx#d.peers, Sx#d.nc,
                             hm_merkle:start(Sx#d.tree)}}]}
    end.

random_peer(S) ->
    case hm_dotted_churn:others(S) of
        [] -> {none, S};
        Ps -> hm_dotted_churn:random_of(Ps, S)
    end.

%%% ================================================================ node-clock anti-entropy

%% A peer's node clock (`sync_clock', Algorithm 3).
-spec sync_clock(hm_dotted:id(), [hm_dotted:id()], hm_node_clock:clock(), #d{}) ->
          {#d{}, effects()}.
sync_clock(From, PPeers, NCp, S = #d{nc = NC, dkm = DKM}) ->
    %% the dots the peer lacks that the dot-key map knows, and their keys' objects
    Missing = hm_node_clock:missing(NC, NCp),
    Found = [{D, K} || D <- Missing, #{D := K} <- [DKM]],
    case length(Found) < length(Missing) of
        %% a dot the dot-key map dropped was held by every copy: the peer lacks it only
        %% because it lost its state (a new incarnation), and only a handoff gives it back
        true -> hm_dotted_churn:transfer_req(From, heard(From, PPeers, NCp, S));
        false -> sync_repair_of(From, PPeers, NCp, Found, S)
    end.

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

%% A peer's `sync_repair': the answer to this copy's `sync_clock' (mode `resolved'), or a
%% handoff (mode `full', hm_dotted_churn:transfer_req/2): the peer's every object, node
%% clock and dot-key map.
-spec sync_repair(hm_dotted:id(), [hm_dotted:id()], hm_node_clock:clock(),
                  [{term(), obj() | none}],
                  {resolved, hm_node_clock:clock(), [{dot(), term()}]} | {full, [{dot(), term()}]},
                  #d{}) -> {#d{}, effects()}.
sync_repair(From, PPeers, NCp, Objs0, Mode, S) ->
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
        {full, _} ->
            {S4, Effs1} = hm_dotted_store:strip_causality(S3),
            {S4, Effs ++ Effs1};
        _ -> {S3, Effs}
    end.

%%% ================================================================ Merkle baseline

%% A peer's step of the Merkle exchange: the levels compared so far (this copy's tree is
%% kept, `anti_entropy' is `merkle').
-spec merkle(hm_dotted:id(), [hm_dotted:id()], hm_node_clock:clock(), hm_merkle:msg(), #d{}) ->
          {#d{}, effects()}.
merkle(From, PPeers, NCp, Step, S = #d{tree = T}) ->
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
    end.

%% The objects of the keys whose leaves differ, and the keys the peer wants back (none in
%% the answer to an answer).
-spec merkle_repair(hm_dotted:id(), [hm_dotted:id()], hm_node_clock:clock(),
                    [{term(), obj() | none}], [term()], #d{}) -> {#d{}, effects()}.
merkle_repair(From, PPeers, NCp, Objs, Want, S0) ->
    {S1, Effs} = repair(Objs, NCp, heard(From, PPeers, NCp, S0)),
    Back = [{send, From, {merkle_repair, S1#d.id, S1#d.peers, S1#d.nc, objects_of(Want, S1), []}}
            || Want =/= []],
    {S1, Effs ++ Back}.

%%% ================================================================ objects exchanged

%% The objects of `Keys' as a repair sends them: as stored, with the dots of the retired
%% ids closed here (their entries were stripped from the stored contexts; a copy that still
%% shows a version of one, superseded here, must see that it is)
objects_of(Keys, S = #d{st = St, nc = NC}) ->
    Cover = hm_dotted_store:closed_cover(NC, S),
    [{K, case maps:get(K, St, none) of
             none -> none;
             {Vers, Ctx} -> {Vers, hm_node_clock:join(Ctx, Cover)}
         end} || K <- Keys].

%% sync_repair's update (hm_dotted_store:update/3) of every object received, filled from the
%% sender's node clock
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
                                ++ [R || {R, _} <- maps:keys(
                                                     element(1, hm_dotted_store:stored(K, Sx)))],
                            {Cover, Gaps} = closed_gaps(NCp, Sx, Gaps0),
                            Full = hm_dotted_store:with_versions(
                                     hm_node_clock:join(
                                       hm_node_clock:join(Ctx, hm_node_clock:from_vv(
                                                                 maps:with(Ids, Base))),
                                       Cover), Vers),
                            {_, Sy, E1} = hm_dotted_store:update(K, {Vers, Full}, Sx),
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

%%% ================================================================ the watermark

%% What a peer's node clock tells: the watermark (Algorithm 3 sync_repair), dot-key entries
%% every copy has, and whether a retired id's gaps can be closed.
-spec heard(hm_dotted:id(), [hm_dotted:id()], hm_node_clock:clock(), #d{}) -> #d{}.
heard(P, PPeers, NCp, S0 = #d{wm = WM, id = Id, nc = NC, peers = Peers}) ->
    S = S0#d{heard = (S0#d.heard)#{P => NCp}},
    WM1 = case lists:member(P, Peers) of
              true -> WM#{P => hm_vv:join(maps:get(P, WM, #{}), hm_node_clock:base(NCp)),
                          Id => hm_node_clock:base(NC)};
              false -> WM#{Id => hm_node_clock:base(NC)}
          end,
    S1 = hm_dotted_churn:confirm_retired(P, PPeers, NCp, S#d{wm = WM1}),
    gc_dot_keys(S1).

%% remove dot-key entries known by every copy of the group (Algorithm 3): through the
%% watermark's bases for the group's ids; for a retired id, whose entry may keep gaps for
%% good, through the clocks last heard from every other copy
-spec gc_dot_keys(#d{}) -> #d{}.
gc_dot_keys(S = #d{dkm = DKM, wm = WM, peers = Peers, heard = H}) ->
    Min = fun(N) -> lists:min([hm_vv:get(N, maps:get(M, WM, #{})) || M <- Peers]) end,
    Known = maps:from_list([{N, Min(N)} || N <- lists:usort([N || {N, _} <- maps:keys(DKM)]),
                                           lists:member(N, Peers)]),
    Others = hm_dotted_churn:others(S),
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
